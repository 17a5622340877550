package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
)

// judgement tracks whether this runner can tell that a peer is gone
// (alive, scan). A peer is gone when its liveness key is absent — but only
// once this runner has been connected, with its own heartbeat recorded in
// the same bucket, for long enough that every live peer has heartbeated
// since: after a (re)connection, a failed heartbeat or a runners bucket
// that was emptied or re-created, an absent key means "cannot tell" until
// the grace has passed (SEMANTICS §8: only a runner that is gone is
// recovered from).
type judgement struct {
	since      time.Time // start of the current period of continuous view
	reconnects uint64    // the connection's reconnect count seen last
	revision   uint64    // revision of the last heartbeat put
}

// beat is the value of a runner's key in weft_runners: when it was put,
// and the number of partitions of the deployment it takes part in (a
// runner whose key says otherwise — a process of an older release, or a
// test's stand-in — is alive to judge by, but is assigned no partition).
// A draining runner says so: it is assigned no partition any more.
type beat struct {
	Schema     int    `json:"schema"`
	At         string `json:"at"`
	Partitions int    `json:"partitions,omitempty"`
	Draining   bool   `json:"draining,omitempty"`
}

func (r *Runner) heartbeat(ctx context.Context) error {
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	b, _ := json.Marshal(beat{Schema: 1, At: r.now().UTC().Format(time.RFC3339Nano), Partitions: r.nparts, Draining: draining})
	rev, err := r.live.Put(ctx, r.id, b)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.judge.since = time.Now() // peers cannot beat either, perhaps
		return fmt.Errorf("runner: heartbeat: %w", err)
	}
	if rev <= r.judge.revision {
		r.judge.since = time.Now() // the bucket was re-created
	}
	r.judge.revision = rev
	return nil
}

func (r *Runner) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(r.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.heartbeat(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// released reports whether runner id deleted its liveness key (a drained
// runner does, once it has handed its runs off): the key's last message
// is a delete marker, kept for a lease. Such a runner is gone at once.
func (r *Runner) released(ctx context.Context, id string) bool {
	if r.liveStream == nil {
		return false
	}
	m, err := r.liveStream.GetLastMsgForSubject(ctx, "$KV."+RunnersBucket+"."+id)
	return err == nil && m.Header.Get("KV-Operation") == "DEL"
}

// judgeGrace is how long this runner's view of the runners bucket must
// have been continuous before an absent key means a gone runner: the lease
// (every live runner puts its key every lease/4), plus the heartbeat
// interval, plus the connection's reconnect wait and jitter (the time a
// peer disconnected by the same server restart may take to come back).
func (r *Runner) judgeGrace() time.Duration {
	return r.lease + r.lease/4 + r.nc.Opts.ReconnectWait + r.nc.Opts.ReconnectJitter
}

// canJudge reports whether this runner can tell now that a peer whose
// liveness key is absent is gone (see judgement).
func (r *Runner) canJudge() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc := r.nc.Stats().Reconnects; rc != r.judge.reconnects || !r.nc.IsConnected() {
		r.judge.since, r.judge.reconnects = time.Now(), rc
		return false
	}
	return time.Since(r.judge.since) >= r.judgeGrace()
}

// alive reports whether runner id may hold a live heartbeat: false only
// when its key is absent and this runner can tell (canJudge, its own key
// present). "Cannot tell" — a read error, a missing bucket, a view too
// recent — is never "gone".
func (r *Runner) alive(ctx context.Context, id string) bool {
	if id == r.id {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.draining
	}
	if r.seenGone(id) {
		return false
	}
	_, err := r.live.Get(ctx, id)
	if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	if r.released(ctx, id) {
		r.log.Info("runner judged gone", "peer", id, "why", "released")
		r.markGone(id)
		return false
	}
	if !r.canJudge() {
		return true
	}
	if _, err := r.live.Get(ctx, r.id); err != nil {
		return true // our own key is not there either: the bucket is not ours to judge by
	}
	r.log.Info("runner judged gone", "peer", id, "why", "liveness key absent")
	r.markGone(id)
	return false
}

// seenGone reports whether alive found runner id gone within the last
// heartbeat interval (lease/4): the takeover of a gone runner's many runs
// judges it once per interval, not once per run.
func (r *Runner) seenGone(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.gone[id]
	if ok && time.Since(at) < r.lease/4 {
		return true
	}
	if ok {
		delete(r.gone, id)
	}
	return false
}

func (r *Runner) markGone(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone == nil {
		r.gone = map[string]time.Time{}
	}
	r.gone[id] = time.Now()
}

// driverKey is a run's weft_drivers entry: the driver and the revision.
type driverKey struct {
	driver   string
	revision uint64
}

// takeoverConcurrency bounds the takeovers a runner makes at once: taking
// over many idle runs (a gone runner's thousands) costs bounded memory and
// goroutines, and the store is not flooded (docs/adr/0014).
const takeoverConcurrency = 32

// takeOrphans wakes the orphans todo (each marked in r.takeover), at most
// takeoverConcurrency at once, and returns when all are done with the
// number of wakes that failed (or were not made: ctx ended).
func (r *Runner) takeOrphans(ctx context.Context, todo []string, drivers map[string]driverKey) int {
	if len(todo) == 0 {
		return 0
	}
	work := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range min(takeoverConcurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := range work {
				if err := r.wakeOrphan(ctx, run, drivers[run]); err != nil && !r.noteQuarantine(err) {
					failed.Add(1)
					if ctx.Err() == nil {
						r.log.Debug("takeover failed", "run", run, "err", err)
					}
				}
				r.takeover.Delete(run)
			}
		}()
	}
	for i, run := range todo {
		select {
		case work <- run:
		case <-ctx.Done():
			for _, left := range todo[i:] {
				r.takeover.Delete(left)
			}
			close(work)
			wg.Wait()
			return int(failed.Load()) + len(todo) - i
		}
	}
	close(work)
	wg.Wait()
	return int(failed.Load())
}

// wakeOrphan wakes run, whose weft_drivers entry k is in a partition this
// runner owns and names another runner (or this one without holding the
// run), and repairs the entry from the log: deleted when the run does not
// exist or ends up not held (idle, or finished: it needs no entry), left
// to the owner when the partition moved on meanwhile.
func (r *Runner) wakeOrphan(ctx context.Context, run string, k driverKey) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rn, err := r.acquire(ctx, run)
	if err != nil {
		var fe *forwardError
		switch {
		case errors.As(err, &fe):
			return nil // the partition's owner wakes it
		case weft.ErrorCode(err) == weft.CodeUnknownRun:
			// A start's intent whose append never landed.
			_ = r.removeDriverKey(ctx, run, k.revision)
			return nil
		}
		return err
	}
	err = r.wakeLocked(ctx, rn, true)
	rn.unlock()
	r.mu.Lock()
	_, held := r.runs[run]
	r.mu.Unlock()
	if !held && err == nil {
		// Idle (evicted or not taken over) or finished: an entry left
		// unchanged since it was read is stale.
		_ = r.removeDriverKey(ctx, run, k.revision)
	}
	return err
}
