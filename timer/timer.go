// Package timer is Weft's durable timer: tool timeouts, settle windows,
// approval expiries and model retry delays that must fire even when no runner
// has the run loaded, and survive any restart.
//
// A timer is a wake-up, never a decision. Every due time is derivable from a
// run's log (aggregate.Pending lists the timers with their times), so firing a
// timer only tells some runner "look at run R now": the runner loads the run,
// asks the aggregate what is due by the store's clock and appends what
// follows. A timer that fires twice, late, or for work that is already done
// changes nothing. That is what makes the mechanism simple:
//
//   - Arm publishes one JetStream scheduled message (server ≥ 2.12,
//     "Nats-Schedule: @at <RFC3339>") on weft.timer.at.<run>.<key> in the
//     WEFT_TIMERS stream, targeting weft.timer.due.<run>. Re-arming the same
//     key replaces the previous schedule (the server rolls the subject up).
//   - At its time the server publishes the body to weft.timer.due.<run>; a
//     durable consumer shared by all runners ("weft_timers") delivers each
//     firing to one runner, which wakes the run and acks.
//
// The server fires schedules with a granularity of about 250 ms, so a runner
// that has the run loaded also keeps a local timer for precision; the
// durable schedule is the backstop for runs nobody has loaded (ADR 0002).
package timer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/lostconsumer"
	"github.com/weftrun/weft/protocol"
)

// The JetStream names of the timer mechanism (docs/protocol/40-commands.md).
const (
	// Stream is the stream holding armed schedules and their firings.
	Stream = protocol.TimersStream
	// SubjectArm prefixes schedule subjects: weft.timer.at.<run>.<key>.
	SubjectArm = "weft.timer.at"
	// SubjectDue prefixes firing subjects: weft.timer.due.<run>.
	SubjectDue = "weft.timer.due"
	// Consumer is the durable consumer shared by all runners.
	Consumer = protocol.TimersConsumer
	// Schema is the schema version of the timer body.
	Schema = 1
)

// StreamConfig returns the configuration of the WEFT_TIMERS stream: file
// storage, message schedules allowed. Each firing carries a one-hour
// message TTL (Nats-Schedule-TTL), so delivered firings do not accumulate.
func StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              Stream,
		Description:       "Weft durable timers: schedules (weft.timer.at.<run>.<key>) and firings (weft.timer.due.<run>)",
		Subjects:          []string{SubjectArm + ".>", SubjectDue + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowRollup:       true,
		AllowDirect:       true,
		Discard:           jetstream.DiscardOld,
	}
}

// EnsureOption configures Ensure.
type EnsureOption func(*jetstream.StreamConfig)

// WithReplicas sets the replica count of WEFT_TIMERS (default 1; 3 on a
// cluster). The shared consumer inherits the stream's.
func WithReplicas(n int) EnsureOption {
	return func(c *jetstream.StreamConfig) { c.Replicas = n }
}

// Ensure creates or updates the WEFT_TIMERS stream and its shared consumer.
func Ensure(ctx context.Context, js jetstream.JetStream, opts ...EnsureOption) error {
	cfg := StreamConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("timer: ensure stream %s: %w", Stream, err)
	}
	_, err = s.CreateOrUpdateConsumer(ctx, ConsumerConfig())
	if err != nil {
		return fmt.Errorf("timer: ensure consumer %s: %w", Consumer, err)
	}
	return nil
}

// ConsumerConfig is the shared durable consumer of firings. AckWait bounds how
// long a firing taken by a runner that then died waits before another runner
// gets it.
func ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Consumer,
		FilterSubject: SubjectDue + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       5 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: 10000,
	}
}

// Fired is the body of a schedule and of its firing.
type Fired struct {
	// Schema is the body's schema version (1).
	Schema int `json:"schema"`
	// Run is the run to wake.
	Run string `json:"run"`
	// Key names the timer within the run, such as "expiry-3".
	Key string `json:"key"`
	// At is the due time the timer was armed for.
	At time.Time `json:"at"`
}

// ErrInvalidKey is returned by Arm for a run or key that is not one NATS
// subject token.
var ErrInvalidKey = errors.New("timer: run and key must be non-empty subject tokens")

// Timers arms durable timers and consumes their firings.
type Timers struct {
	js jetstream.JetStream
}

// purge removes the messages of subject (a filter) from the stream: one
// request, no stream lookup first.
func (t *Timers) purge(ctx context.Context, subject string) error {
	b, err := json.Marshal(struct {
		Filter string `json:"filter"`
	}{subject})
	if err != nil {
		return err
	}
	m, err := t.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+Stream, b)
	if err != nil {
		return err
	}
	var res struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &res); err != nil {
		return fmt.Errorf("timer: purge %s: %w", subject, err)
	}
	if res.Error != nil {
		return fmt.Errorf("timer: purge %s: %d %s", subject, res.Error.Code, res.Error.Description)
	}
	return nil
}

// New returns Timers over js. The stream must exist (Ensure).
func New(js jetstream.JetStream) *Timers { return &Timers{js: js} }

func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ". *>\t\r\n")
}

// Arm schedules a wake-up of run at at, under key (one subject token, such
// as "timeout-1_c1"). Arming the same run and key again replaces the earlier
// schedule. A time in the past fires at once.
func (t *Timers) Arm(ctx context.Context, run, key string, at time.Time) error {
	if !validToken(run) || !validToken(key) {
		return fmt.Errorf("%w: %q %q", ErrInvalidKey, run, key)
	}
	body, err := json.Marshal(Fired{Schema: Schema, Run: run, Key: key, At: at.UTC()})
	if err != nil {
		return err
	}
	msg := &jsmsg{subject: SubjectArm + "." + run + "." + key, body: body}
	_, err = t.js.PublishMsg(ctx, msg.nats(at))
	if err != nil {
		return fmt.Errorf("timer: arm %s/%s: %w", run, key, err)
	}
	return nil
}

// Disarm removes the schedule of run and key, if any. Disarming is an
// optimisation: a stale firing is harmless.
func (t *Timers) Disarm(ctx context.Context, run, key string) error {
	if !validToken(run) || !validToken(key) {
		return fmt.Errorf("%w: %q %q", ErrInvalidKey, run, key)
	}
	return t.purge(ctx, SubjectArm+"."+run+"."+key)
}

// DisarmRun removes every schedule of run (for example once it finished):
// one purge of weft.timer.at.<run>.>.
func (t *Timers) DisarmRun(ctx context.Context, run string) error {
	if !validToken(run) {
		return fmt.Errorf("%w: %q", ErrInvalidKey, run)
	}
	return t.purge(ctx, SubjectArm+"."+run+".>")
}

// NakCap bounds the delay before a firing whose handling failed is
// delivered again.
const NakCap = 10 * time.Second

// nakDelay is the delay before the delivery after the n-th (1, 2, ...)
// of a firing whose handling failed: 100 ms, doubling, at most NakCap.
func nakDelay(n uint64) time.Duration {
	d := 100 * time.Millisecond
	for i := uint64(1); i < n && d < NakCap; i++ {
		d *= 2
	}
	return min(d, NakCap)
}

// Consume delivers every firing to fn until ctx ends (it then returns nil),
// or until the consumer cannot be bound or stops delivering — deleted, its
// stream made again, lost by a restarted server —, when it returns an
// error: the caller starts it again. A consumer that is missing when
// Consume starts is made again (ConsumerConfig). A firing is acked when
// fn returns nil and redelivered (to any runner) otherwise, after a delay
// that doubles with each delivery from 100 ms up to NakCap.
func (t *Timers) Consume(ctx context.Context, fn func(context.Context, Fired) error) error {
	c, err := t.js.Consumer(ctx, Stream, Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Deleted (an operator) or lost by a server after Ensure made it:
		// made again here, or every runner's Consume would fail for ever
		// and no firing would be delivered until the next provisioning.
		// It inherits the stream's replicas, as Ensure's does.
		c, err = t.js.CreateOrUpdateConsumer(ctx, Stream, ConsumerConfig())
	}
	if err != nil {
		return fmt.Errorf("timer: consumer: %w", err)
	}
	var lost atomic.Pointer[error] // why a server's loss of the consumer was looked up
	cc, err := c.Consume(func(m jetstream.Msg) {
		var f Fired
		if err := json.Unmarshal(m.Data(), &f); err != nil || f.Run == "" {
			_ = m.Term()
			return
		}
		if err := fn(ctx, f); err != nil {
			n := uint64(1)
			if md, merr := m.Metadata(); merr == nil {
				n = md.NumDelivered
			}
			_ = m.NakWithDelay(nakDelay(n))
			return
		}
		_ = m.Ack()
	}, lostconsumer.StopWhenGone(c, func(err error) { lost.Store(&err) }))
	if err != nil {
		return fmt.Errorf("timer: consume: %w", err)
	}
	// A pull consume ends by itself on a terminal status (the consumer was
	// deleted, the stream made again), or is stopped when a server lost
	// the consumer (lostconsumer): the caller starts it again (runner's
	// consumeTimers), which makes the consumer again, or no firing would
	// be delivered here.
	select {
	case <-ctx.Done():
		cc.Stop()
		return nil
	case <-cc.Closed():
		if cause := lost.Load(); cause != nil {
			return fmt.Errorf("timer: consume: the consumer is gone from the server, stopped: %w", *cause)
		}
		return errors.New("timer: consume: the consumer stopped")
	}
}
