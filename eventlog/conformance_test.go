package eventlog_test

// The log's conformance suite: every test runs against a
// real in-process nats-server on a random loopback port with t.TempDir()
// storage (natstest). Order, conflict and lost-ack retry are in
// eventlog_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// decision returns k events of decision d: turn = d*100 + i, so a reader can
// tell which decision an event belongs to and whether it is complete.
func decision(d, k int) []events.Event {
	evs := make([]events.Event, k)
	for i := range evs {
		evs[i] = events.ModelRequested{Turn: int64(d*100 + i), Incarnation: k}
	}
	return evs
}

// checkWhole fails unless envs consist of whole decisions built by decision.
func checkWhole(t *testing.T, envs []events.Envelope) {
	t.Helper()
	for i := 0; i < len(envs); {
		e, err := envs[i].Event()
		if err != nil {
			t.Fatal(err)
		}
		first := e.(events.ModelRequested)
		k := first.Incarnation
		if first.Turn%100 != 0 {
			t.Fatalf("version %d starts mid-decision (turn %d)", envs[i].Version, first.Turn)
		}
		if i+k > len(envs) {
			t.Fatalf("half a decision visible: version %d starts a decision of %d, only %d events follow", envs[i].Version, k, len(envs)-i)
		}
		for j := 1; j < k; j++ {
			e, _ := envs[i+j].Event()
			if got := e.(events.ModelRequested); got.Turn != first.Turn+int64(j) {
				t.Fatalf("decision at version %d: event %d has turn %d", envs[i].Version, j, got.Turn)
			}
		}
		i += k
	}
}

// checkChain fails unless envs are versions 1..n of run with a sound chain.
func checkChain(t *testing.T, run string, envs []events.Envelope, head eventlog.Head) {
	t.Helper()
	prev := ""
	for i, env := range envs {
		if env.Run != run || env.Version != uint64(i+1) || env.Prev != prev {
			t.Fatalf("run %s event %d: run %s version %d prev %q want %q", run, i, env.Run, env.Version, env.Prev, prev)
		}
		prev = env.Hash()
	}
	if head.Version != uint64(len(envs)) || head.Hash != prev {
		t.Fatalf("run %s head %+v, want version %d hash %s", run, head, len(envs), prev)
	}
}

// TestConformance_AtomicMultiEventAppend: readers (Load and Subscribe)
// racing a writer of 1..5-event decisions never see half a decision.
func TestConformance_AtomicMultiEventAppend(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	const decisions = 60
	// A subscriber follows the log while the writer appends: at every
	// message boundary (Last) what it has seen is whole decisions.
	var (
		subMu      sync.Mutex
		subGot     []events.Envelope
		boundaries []int // len(subGot) at each message's last event
		subErr     = make(chan error, 1)
	)
	sctx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	go func() {
		subErr <- s.Log.Subscribe(sctx, 0, func(se eventlog.StreamEvent) error {
			subMu.Lock()
			defer subMu.Unlock()
			subGot = append(subGot, se.Envelope)
			if se.Last {
				boundaries = append(boundaries, len(subGot))
			}
			return nil
		})
	}()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		var h eventlog.Head
		for d := 1; d <= decisions; d++ {
			var err error
			if _, h, err = s.Log.Append(ctx, "atomic", h, t0, decision(d, 1+d%5)...); err != nil {
				t.Errorf("append decision %d: %v", d, err)
				return
			}
		}
	}()
	loads := 0
	for {
		envs, head, err := s.Log.Load(ctx, "atomic")
		if err != nil {
			t.Fatal(err)
		}
		checkWhole(t, envs)
		checkChain(t, "atomic", envs, head)
		loads++
		select {
		case <-done:
		default:
			continue
		}
		break
	}
	wg.Wait()
	envs, _, err := s.Log.Load(ctx, "atomic")
	if err != nil {
		t.Fatal(err)
	}
	checkWhole(t, envs)

	// The racing subscriber catches up with everything, whole.
	for {
		subMu.Lock()
		n := len(subGot)
		subMu.Unlock()
		if n >= len(envs) || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancelSub()
	if err := <-subErr; err != nil {
		t.Fatal(err)
	}
	if len(subGot) != len(envs) {
		t.Fatalf("subscribe saw %d events, want %d", len(subGot), len(envs))
	}
	for _, b := range boundaries {
		checkWhole(t, subGot[:b])
	}
	if len(boundaries) != decisions {
		t.Fatalf("subscribe saw %d message boundaries, want one per decision (%d)", len(boundaries), decisions)
	}
	t.Logf("%d loads raced the writer", loads)
}

// TestConformance_64GoroutinesOn64Runs: concurrent writers on distinct runs
// never interfere.
func TestConformance_64GoroutinesOn64Runs(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	const writers, perRun = 64, 8
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("run-%02d", w)
			var h eventlog.Head
			for d := 1; d <= perRun; d++ {
				var err error
				if _, h, err = s.Log.Append(ctx, run, h, t0, decision(d, 1+d%3)...); err != nil {
					t.Errorf("%s decision %d: %v", run, d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := 0; w < writers; w++ {
		run := fmt.Sprintf("run-%02d", w)
		envs, head, err := s.Log.Load(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		checkWhole(t, envs)
		checkChain(t, run, envs, head)
		if n := countDecisions(t, envs); n != perRun {
			t.Fatalf("%s: %d decisions, want %d", run, n, perRun)
		}
	}
}

func countDecisions(t *testing.T, envs []events.Envelope) int {
	n := 0
	for _, env := range envs {
		e, _ := env.Event()
		if e.(events.ModelRequested).Turn%100 == 0 {
			n++
		}
	}
	return n
}

// TestScenario37_ExactlyOneWinnerPerVersion: 64 goroutines append to one run
// from the same head at once, round after round; exactly one wins each
// round, the 63 others get a ConflictError naming the winner's head.
func TestScenario37_ExactlyOneWinnerPerVersion(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	const writers, rounds = 64, 6
	var head eventlog.Head
	for r := 1; r <= rounds; r++ {
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			mu        sync.Mutex
			winners   []eventlog.Head
			conflicts []*eventlog.ConflictError
		)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, h, err := s.Log.Append(ctx, "contended", head, t0, decision(r*1000+w, 2)...)
				mu.Lock()
				defer mu.Unlock()
				var ce *eventlog.ConflictError
				switch {
				case err == nil:
					winners = append(winners, h)
				case errors.As(err, &ce):
					conflicts = append(conflicts, ce)
				default:
					t.Errorf("round %d writer %d: %v", r, w, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || len(conflicts) != writers-1 {
			t.Fatalf("round %d: %d winners, %d conflicts; want 1 and %d", r, len(winners), len(conflicts), writers-1)
		}
		for _, ce := range conflicts {
			if ce.Current != winners[0] {
				t.Fatalf("round %d: conflict reports head %+v, winner is %+v", r, ce.Current, winners[0])
			}
		}
		head = winners[0]
	}
	envs, h, err := s.Log.Load(ctx, "contended")
	if err != nil {
		t.Fatal(err)
	}
	checkChain(t, "contended", envs, h)
	if len(envs) != 2*rounds {
		t.Fatalf("%d events, want %d", len(envs), 2*rounds)
	}
}

// TestConformance_64GoroutinesOnOneRun: 64 writers each loop load-append
// on one run until it holds 128 decisions; every version is won exactly
// once and the log is the winners' events in version order.
func TestConformance_64GoroutinesOnOneRun(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	const writers, target = 64, 128
	var (
		mu        sync.Mutex
		won       = map[uint64]string{} // version -> event id
		conflicts atomic.Int64
		wg        sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := 0; ; d++ {
				h, err := s.Log.Head(ctx, "one")
				if err != nil {
					t.Error(err)
					return
				}
				if h.Version >= target {
					return
				}
				envs, _, err := s.Log.Append(ctx, "one", h, t0, decision(w*1000+d%10, 1)...)
				var ce *eventlog.ConflictError
				if errors.As(err, &ce) {
					conflicts.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := won[envs[0].Version]; dup {
					t.Errorf("version %d won twice: %s and %s", envs[0].Version, prev, envs[0].ID)
				}
				won[envs[0].Version] = envs[0].ID
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	envs, h, err := s.Log.Load(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	checkChain(t, "one", envs, h)
	if len(envs) < target || len(envs) != len(won) {
		t.Fatalf("%d events stored, %d wins recorded, target %d", len(envs), len(won), target)
	}
	for _, env := range envs {
		if won[env.Version] != env.ID {
			t.Fatalf("version %d stored %s, winner was %s", env.Version, env.ID, won[env.Version])
		}
	}
	t.Logf("%d conflicts", conflicts.Load())
}

// TestConformance_SurvivesRestart: what was acknowledged is there after the
// embedded server restarts on the same store, and appends continue.
func TestConformance_SurvivesRestart(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	h := mustAppend(t, s.Log, "durable", eventlog.Head{}, decision(1, 3)...)
	h = mustAppend(t, s.Log, "durable", h, decision(2, 1)...)
	before, _, err := s.Log.Load(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	s.Restart()
	after, h2, err := s.Log.Load(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	if h2 != h || len(after) != len(before) {
		t.Fatalf("after restart: head %+v (%d events), before %+v (%d)", h2, len(after), h, len(before))
	}
	for i := range before {
		if before[i].Hash() != after[i].Hash() {
			t.Fatalf("event %d changed over restart", i+1)
		}
	}
	h3 := mustAppend(t, s.Log, "durable", h2, decision(3, 2)...)
	if _, _, err := s.Log.Append(ctx, "durable", h, t0, decision(9, 1)...); !errors.As(err, new(*eventlog.ConflictError)) {
		t.Fatalf("stale head after restart: %v", err)
	}
	envs, h4, err := s.Log.Load(ctx, "durable")
	if err != nil || h4 != h3 || len(envs) != 6 {
		t.Fatalf("after restart and append: %d events head %+v, %v", len(envs), h4, err)
	}
	checkChain(t, "durable", envs, h4)
}

// TestConformance_OlderStreamUpdatedInPlace: a WEFT_EVENTS created by an
// older provisioning (no direct gets, no duplicate window, old description)
// is updated in place by provision.Ensure, keeping its messages.
func TestConformance_OlderStreamUpdatedInPlace(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	if err := s.JS.DeleteStream(ctx, eventlog.Stream); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: eventlog.Stream, Subjects: []string{"weft.ev.>"}, Storage: jetstream.FileStorage,
		Description: "old", Duplicates: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	h := mustAppend(t, s.Log, "old", eventlog.Head{}, decision(1, 2)...)

	if err := provision.Ensure(ctx, s.JS, nil, provision.WithReplicas(1)); err != nil {
		t.Fatalf("ensure over old stream: %v", err)
	}
	str, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := str.CachedInfo().Config
	if !cfg.AllowDirect || cfg.Duplicates != provision.EventsDuplicates || cfg.Description != provision.EventsConfig().Description {
		t.Fatalf("stream not updated: %+v", cfg)
	}
	envs, h2, err := s.Log.Load(ctx, "old")
	if err != nil || h2 != h || len(envs) != 2 {
		t.Fatalf("after update: %d events head %+v (want %+v), %v", len(envs), h2, h, err)
	}
	// Idempotent: a second Ensure changes nothing.
	if err := provision.Ensure(ctx, s.JS, nil, provision.WithReplicas(1)); err != nil {
		t.Fatal(err)
	}
}

// TestSubscribeResumesFromSequence: Subscribe from a message's sequence
// delivers it and everything after, in log order across runs.
func TestSubscribeResumesFromSequence(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	ha := mustAppend(t, s.Log, "a", eventlog.Head{}, decision(1, 2)...)
	hb := mustAppend(t, s.Log, "b", eventlog.Head{}, decision(1, 1)...)
	mustAppend(t, s.Log, "a", ha, decision(2, 1)...)

	collect := func(from uint64, want int) []eventlog.StreamEvent {
		var got []eventlog.StreamEvent
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := s.Log.Subscribe(sctx, from, func(se eventlog.StreamEvent) error {
			got = append(got, se)
			if len(got) == want {
				cancel()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := collect(0, 4)
	want := []struct {
		run  string
		v    uint64
		last bool
	}{{"a", 1, false}, {"a", 2, true}, {"b", 1, true}, {"a", 3, true}}
	for i, w := range want {
		if all[i].Envelope.Run != w.run || all[i].Envelope.Version != w.v || all[i].Last != w.last {
			t.Fatalf("event %d: %s v%d last=%v, want %+v", i, all[i].Envelope.Run, all[i].Envelope.Version, all[i].Last, w)
		}
	}
	tail := collect(hb.Seq, 2)
	if tail[0].Seq != hb.Seq || tail[0].Envelope.Run != "b" || tail[1].Envelope.Run != "a" {
		t.Fatalf("resume from %d: %+v", hb.Seq, tail)
	}

	// An error from fn stops Subscribe and is returned.
	boom := errors.New("boom")
	if err := s.Log.Subscribe(ctx, 0, func(eventlog.StreamEvent) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Subscribe returned %v, want boom", err)
	}
}
