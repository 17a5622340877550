package ownership

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
)

// peersRunner is what Peers needs from the command loop that runs it
// (through the Coordinator: peersLoop): whether this runner drains, and
// whom to tell that the set of live runners changed. Its methods take the
// loop's own locks; Peers calls them with none of its own held.
type peersRunner interface {
	// Draining reports whether this runner drains: it beats so, is
	// assigned no partition, and judges itself not alive.
	Draining() bool
	// RunnersChanged is called when a runner left the view (its key
	// expired or was deleted) once the view is ready: the partition loop
	// passes again now, not at its next tick.
	RunnersChanged()
}

// Config is what Peers reads: this runner's identity and lease, the
// deployment's partitions, the connection and the weft_runners bucket.
// Every field but Stamp, Log and Hook is required.
type Config struct {
	ID         string
	Lease      time.Duration // a peer beats every Lease/4
	Partitions int           // the deployment's number of partitions, named in each beat
	Conn       *nats.Conn    // its reconnect count and wait tell the periods of continuous view
	Live       jetstream.KeyValue
	LiveStream jetstream.Stream // Live's stream, for reading the keys' markers
	Bucket     string           // Live's name (weft_runners)
	Clock      clock.Clock      // measures this process's intervals, drives the tickers
	Stamp      func() time.Time // stamps a beat's recorded time (the store clock)
	Log        *slog.Logger
	// Hook, when set (tests), is called at the named points: "runners-view"
	// when the watcher took an update into the view (key "": the view is
	// ready), "runners-changed" when a runner left it.
	Hook func(event, key string)
}

// Peers is this runner's view of its peers: its heartbeat, the runners
// view (WatchRunners, liveRunners) and the judgement of liveness (alive).
type Peers struct {
	cfg     Config
	loop    peersRunner
	runners *runnersView
	judged  liveness
	stale   staleRounds // what the rounds could not decide (stale.go)
}

// New returns the Peers of cfg, run by loop. Its first period of
// continuous view begins now, at the connection's current reconnect
// count.
func New(cfg Config, loop peersRunner) *Peers {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Stamp == nil {
		cfg.Stamp = time.Now
	}
	p := &Peers{cfg: cfg, loop: loop, runners: newRunnersView()}
	p.judged.start(cfg.Clock.Now(), cfg.Conn.Stats().Reconnects)
	return p
}

// Ready returns a channel closed once the runners view was first ready
// (its watcher delivered the bucket as it is).
func (p *Peers) Ready() <-chan struct{} { return p.runners.first }

func (p *Peers) hook(event, key string) {
	if p.cfg.Hook != nil {
		p.cfg.Hook(event, key)
	}
}

// liveness is this runner's judgement of its peers (alive): the period
// of continuous view (judgement) and the peers found gone lately (the
// gone cache). Its lock is its own, not the command loop's: judging a
// peer never waits for a run's bookkeeping, nor the other way.
type liveness struct {
	mu    sync.Mutex
	judge judgement
	gone  map[string]time.Time // runners alive found gone, and when
}
