package runner_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// stalledClaimsJS is the runner's JetStream, except that for run: the
// first append of a model_replied fails with nothing published (lost is
// closed then), and the first claim create of its attempts waits until
// release is closed, past its context (a claims bucket that stalls while
// the log answers). The append is failed only once that create was sent
// (creating), or after 10 s without it: the claim goes out alongside the
// append, from the worker's goroutine, and may be sent just after it.
type stalledClaimsJS struct {
	jetstream.JetStream
	run            string
	fired, stalled atomic.Bool
	lost, release  chan struct{}
	creating       chan struct{}
	released       sync.Once
}

func (s *stalledClaimsJS) unstall() { s.released.Do(func() { close(s.release) }) }

func (s *stalledClaimsJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "weft.ev.") && strings.Contains(m.Subject, s.run) && bytes.Contains(m.Data, []byte(`"type":"model_replied"`)) && s.fired.CompareAndSwap(false, true) {
		defer close(s.lost)
		select {
		case <-s.creating:
		case <-time.After(10 * time.Second):
		}
		return nil, errors.Join(errors.New("the connection dropped before the append was sent"), nats.ErrConnectionClosed)
	}
	return s.JetStream.PublishMsg(ctx, m, opts...)
}

func (s *stalledClaimsJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := s.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != api.ClaimsBucket {
		return kv, err
	}
	return &stalledClaimsKV{KeyValue: kv, s: s}, nil
}

type stalledClaimsKV struct {
	jetstream.KeyValue
	s *stalledClaimsJS
}

func (k *stalledClaimsKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if strings.HasPrefix(key, k.s.run+".") && k.s.stalled.CompareAndSwap(false, true) {
		close(k.s.creating)
		<-k.s.release
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

// TestSemantics8_ADrainHandsOffARunWhosePreparedClaimIsStillBeingRemoved:
// a model reply whose append with its fence is not recorded aborts the
// attempt's prepared task (docs/adr/0031-claim-with-the-fence.md), whose
// claim's create the stalled claims bucket does not answer; the runner
// does not wait for that task under the run's lock, so that a drain
// begun then still records the run's hand-off within its window
// (docs/semantics.md §8, the graceful row: the run is handed off, not
// left to a takeover) in its first hand-off pass, whose wait for the
// run's lock is 2 s here. The abort held the lock for 10 s. The stall lasts
// until the drain released its partitions.
func TestSemantics8_ADrainHandsOffARunWhosePreparedClaimIsStillBeingRemoved(t *testing.T) {
	t.Parallel()
	const run = "abort-drain"
	h := newHarness(t)
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("done"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	js := &stalledClaimsJS{JetStream: h.srv.JS, run: run, lost: make(chan struct{}), release: make(chan struct{}), creating: make(chan struct{})}
	// Whether the run's hand-off is recorded once the drain's first
	// hand-off pass is over (the first release of a quiet partition comes
	// after it); the stall ends once the drain released its partitions.
	var looked, handedFirst atomic.Bool
	hook := func(event string, _ int, _ string) {
		switch event {
		case "release-quiet":
			if looked.CompareAndSwap(false, true) {
				handedFirst.Store(h.state(run).HandedOff())
			}
		case "drain-released":
			js.unstall()
		}
	}
	r, err := runner.New(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*time.Second), runner.WithDrainWindow(5*time.Second),
		runner.WithHandOffLockTimeout(2*time.Second), runner.WithHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	t.Cleanup(js.unstall)
	c := ctx(t)
	warmHandOff(t, h, r)
	h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	select {
	case <-js.lost:
	case <-c.Done():
		t.Fatal("the reply's append was not sent")
	}
	if !js.stalled.Load() {
		t.Fatal("the reply's append went out with no prepared claim")
	}
	stop() // a drain
	if !looked.Load() {
		t.Fatal("the drain released no quiet partition")
	}
	if !handedFirst.Load() {
		t.Error("the drain's hand-off pass did not record the run's hand-off: the run's lock was held while an aborted claim's create stalled")
	}
}
