package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// sealer seals decisions with a head_signed over the head it is given
// (what a runner's head key signs, docs/adr/0026-signed-heads.md), and
// counts its calls.
type sealer struct {
	mu    sync.Mutex
	calls int
}

func (s *sealer) seal(version uint64, hash string) (events.Event, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	return events.HeadSigned{Version: version, Hash: hash, Key: "UKEY", Signer: "test", Signature: "sig", End: true}, nil
}

// checkSealed fails unless envs, a run's history, is decisions of dlen
// events each followed by its seal, all in the message of head.Seq for
// the last one: the seal is the message's last event, signs the event
// just before it (version and hash) and continues the chain.
func checkSealed(t *testing.T, envs []events.Envelope, head eventlog.Head) {
	t.Helper()
	last := envs[len(envs)-1]
	if last.Type != events.NameHeadSigned || head.Version != last.Version || head.Hash != last.Hash() {
		t.Fatalf("history ends with %s at %d, head %+v: want the seal, and the head after it", last.Type, last.Version, head)
	}
	for i, env := range envs {
		if env.Type != events.NameHeadSigned {
			continue
		}
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		hs := ev.(events.HeadSigned)
		prev := envs[i-1]
		if hs.Version != prev.Version || hs.Hash != prev.Hash() || env.Prev != prev.Hash() || env.Version != prev.Version+1 {
			t.Fatalf("seal at %d signs %d:%s, prev %s; the event before it is %d:%s", env.Version, hs.Version, hs.Hash, env.Prev, prev.Version, prev.Hash())
		}
	}
}

// TestAppendSealedIsOneMessage (docs/adr/0044): a decision sealed by a
// signed head is ONE log message holding the decision and, last, the
// head_signed over the decision's last envelope (its version and hash,
// known as eventlog stamps them); Append continues from the head it
// returns; a nil seal leaves the decision as Append stores it, and a seal
// that fails stores nothing and says so (a *NotSentError, unavailable:
// no re-read needed).
func TestAppendSealedIsOneMessage(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	var sl sealer
	envs, h, err := s.Log.AppendSealed(ctx, "s1", eventlog.Head{}, t0, sl.seal, ev(1), ev(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 3 || sl.calls != 1 || h.Version != 3 {
		t.Fatalf("%d envelopes, %d seal calls, head %+v: want the decision's 2 and its seal, one call, version 3", len(envs), sl.calls, h)
	}
	last, lh, err := s.Log.Last(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 3 || lh != h {
		t.Fatalf("the run's last message holds %d events, head %+v: want the decision and its seal, %+v", len(last), lh, h)
	}
	h = mustAppend(t, s.Log, "s1", h, ev(3))
	envs4, h, err := s.Log.AppendSealed(ctx, "s1", h, t0, func(uint64, string) (events.Event, error) { return nil, nil }, ev(4))
	if err != nil || len(envs4) != 1 {
		t.Fatalf("a nil seal: %d envelopes, %v; want the decision alone", len(envs4), err)
	}
	boom := errors.New("no key")
	_, _, err = s.Log.AppendSealed(ctx, "s1", h, t0, func(uint64, string) (events.Event, error) { return nil, boom }, ev(5))
	var notSent *eventlog.NotSentError
	if !errors.Is(err, boom) || !errors.As(err, &notSent) || weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("a failing seal: %v (code %s), want its error as a *NotSentError, code unavailable: nothing sent", err, weft.ErrorCode(err))
	}
	all, head, err := s.Log.Load(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 || head != h {
		t.Fatalf("stored %d events, head %+v: want 5 (the failing seal's decision not stored), %+v", len(all), head, h)
	}
	checkSealed(t, all[:3], eventlog.Head{Version: 3, Hash: all[2].Hash()})
	info, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("stream holds %d messages, want 3", n)
	}
}

// TestAppendSealedLostAckLandsOnce: a sealed decision whose
// acknowledgement is lost is retried as the same message (same id, the
// seal computed once) and found landed: stored once, sealed.
func TestAppendSealedLostAckLandsOnce(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	lost := 0
	l := eventlog.New(s.JS, eventlog.WithPublishWrapper(func(next eventlog.PublishFunc) eventlog.PublishFunc {
		return func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
			ack, err := next(ctx, m)
			if err == nil && lost < 2 {
				lost++
				return nil, nats.ErrTimeout
			}
			return ack, err
		}
	}))
	var sl sealer
	_, h1, err := l.AppendSealed(ctx, "r", eventlog.Head{}, t0, sl.seal, ev(1))
	if err != nil {
		t.Fatalf("sealed append with a lost ack: %v", err)
	}
	_, h2, err := l.AppendSealed(ctx, "r", h1, t0, sl.seal, ev(2), ev(3))
	if err != nil {
		t.Fatalf("second sealed append with a lost ack: %v", err)
	}
	if lost != 2 || sl.calls != 2 {
		t.Fatalf("lost %d acks, %d seal calls: want 2 and 2", lost, sl.calls)
	}
	envs, head, err := s.Log.Load(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 5 || head != h2 {
		t.Fatalf("stored %d events head %+v, want 5 and %+v", len(envs), head, h2)
	}
	checkSealed(t, envs, head)
	info, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

// TestSemantics8_GroupCommitSealedDecisions (docs/adr/0025-group-commit.md,
// docs/adr/0044): sealed decisions of many runs waiting at once leave as
// one atomic batch, each the one message AppendSealed publishes alone, and
// AppendBatch seals a Decision with its Seal.
func TestSemantics8_GroupCommitSealedDecisions(t *testing.T) {
	const n = 16
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx := ctxT(t)
	l := eventlog.New(s.JS, eventlog.WithGroupCommitTest(n, 0))
	var sl sealer
	st0 := eventlog.ReadCommitStats()
	var wg sync.WaitGroup
	heads := make([]eventlog.Head, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, heads[i], errs[i] = l.AppendSealed(ctx, fmt.Sprintf("gs%d", i), eventlog.Head{}, t0, sl.seal, ev(1), ev(2))
		}()
	}
	wg.Wait()
	if st1 := eventlog.ReadCommitStats(); st1.Batches-st0.Batches != 1 || st1.Batched-st0.Batched != n {
		t.Fatalf("commit stats %+v → %+v: want one batch of %d", st0, st1, n)
	}
	var ds []eventlog.Decision
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("gs%d: %v", i, errs[i])
		}
		ds = append(ds, eventlog.Decision{Run: fmt.Sprintf("gs%d", i), Head: heads[i], At: t0, Events: []events.Event{ev(3)}, Seal: sl.seal})
	}
	out := l.AppendBatch(ctx, ds)
	for i, o := range out {
		if o.Err != nil || len(o.Envelopes) != 2 || o.Head.Version != 5 {
			t.Fatalf("batch decision %d: %+v, want the decision and its seal at 5", i, o)
		}
		envs, head, err := s.Log.Load(ctx, ds[i].Run)
		if err != nil {
			t.Fatal(err)
		}
		if head != o.Head || len(envs) != 5 {
			t.Fatalf("%s: head %+v (want %+v), %d events", ds[i].Run, head, o.Head, len(envs))
		}
		checkSealed(t, envs, head)
	}
}
