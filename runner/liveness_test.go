package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 "only a runner that is gone is recovered from", across a
// NATS server restart: liveness survives the restart and "cannot tell"
// (the runners bucket missing or emptied, a connection just re-established,
// a read error) is never read as "dead". Two live runners; the server
// restarts on the same store; right after it, the runner that does not
// drive a suspended run is woken for it again and again. It must forward,
// never take the run over from its live driver; the approval then completes
// the run on the same driver.
func TestRecoverOnlyFromAGoneRunner_LivenessSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)) }
	ra, _ := h.startRunner([]*agent.Agent{mk()})
	rb, _ := h.startRunner([]*agent.Agent{mk()})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "lv", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("lv", aggregate.StatusSuspended)
	driver, other := ra.ID(), rb.ID()
	if s.Runner() == rb.ID() {
		driver, other = rb.ID(), ra.ID()
	}

	// Liveness is stored on file: it survives the restart.
	kv, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; cfg.Storage != jetstream.FileStorage {
		t.Errorf("%s is stored in %s, want file storage", runner.RunnersBucket, cfg.Storage)
	}

	// On the wall clock, not a fake ownership clock: the windows below are
	// the server's (a bucket deleted and re-created, a restart) and the
	// client's reconnection (its reconnect wait), and the live runners'
	// keys must be beaten back into the new bucket before its max age
	// (the server's time) lapses them.
	wake, _ := json.Marshal(map[string]any{"kind": "wake", "run": "lv"})
	hammer := func(what string, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); {
			_, _ = h.srv.Conn.Request(runner.ForwardPrefix+other+".cmd", wake, time.Second)
			// wall clock: the windows are the server's (a bucket deleted and re-created, a restart), see above
			time.Sleep(10 * time.Millisecond)
		}
		if rs := h.recoveries("lv"); len(rs) != 0 {
			t.Fatalf("%s: a live runner's run was taken over: %+v", what, rs)
		}
	}
	// The bucket is gone (as a memory bucket is after a restart, until
	// someone provisions it again): nobody can tell who is alive.
	if err := h.srv.JS.DeleteKeyValue(c, runner.RunnersBucket); err != nil {
		t.Fatal(err)
	}
	hammer("runners bucket missing", time.Second)
	// Provisioned again, empty: still nobody can tell until the live
	// runners have heartbeated into it.
	if err := runner.Provision(c, h.srv.JS, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	hammer("runners bucket re-created", 2*time.Second)
	// The server restarts on the same store.
	h.srv.Restart()
	h.client = api.NewClient(h.srv.Conn)
	hammer("server restarted", 4*time.Second)

	act := s.Actions()[0]
	req := api.ApproveRequest{CommandID: "a", Run: "lv", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"}
	for {
		_, err := h.client.Approve(c, req)
		if err == nil {
			break
		}
		if c.Err() != nil {
			t.Fatal(err)
		}
		// wall clock: a retry of the approval until the restarted server and the runners' reconnections answer
		time.Sleep(50 * time.Millisecond)
	}
	s, out := finished(t, h, "lv")
	if out.Kind != events.OutcomeCompleted || s.Runner() != driver || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, driver %s (want %s), starts %d", out.Kind, s.Runner(), driver, b.starts.Load())
	}
	if rs := h.recoveries("lv"); len(rs) != 0 {
		t.Fatalf("recoveries %+v, want none", rs)
	}
}

// A weft_runners bucket an earlier release created in memory (emptied by
// every server restart) is re-created on file by Provision.
func TestProvisionMovesTheRunnersBucketToFile(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := ctx(t)
	if _, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: runner.RunnersBucket, TTL: time.Second, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if err := runner.Provision(c, srv.JS, time.Second); err != nil {
		t.Fatal(err)
	}
	s, err := srv.JS.Stream(c, "KV_"+runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.Storage != jetstream.FileStorage || cfg.MaxAge != time.Second {
		t.Fatalf("runners bucket storage %s, max age %s; want file, 1s", cfg.Storage, cfg.MaxAge)
	}
}

// docs/semantics.md §8 "only a runner that is gone is recovered from" — and a
// live runner stays live: a heartbeat that fails, even the first one (the
// runners bucket refuses writes, or was deleted by an operator or a server
// restart while the runner started), is "cannot tell", never a reason to
// stop serving. The runner serves on, judges nobody gone meanwhile, and
// its liveness key appears once the bucket accepts writes again.
func TestLiveness_AFailedHeartbeatNeverStopsARunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, "someone-else", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := h.srv.JS.Stream(c, "KV_"+runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	declared := st.CachedInfo().Config
	full := declared
	full.MaxMsgs, full.Discard = int64(st.CachedInfo().State.Msgs), jetstream.DiscardNew
	if _, err := h.srv.JS.UpdateStream(c, full); err != nil {
		t.Fatal(err)
	}
	m := model.NewScripted("s", model.Answer("ok"))
	nc := h.srv.Connect(nats.MaxReconnects(-1))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// On the fake ownership clock (ownClock): it follows the wall clock
	// while the bucket refuses writes — the runner's heartbeats fail every
	// heartbeat interval, as in production — and is stepped, once the
	// bucket accepts writes again, until the runner's key is there.
	clk := newOwnClock(t)
	r, err := runner.New(nc, js, []*agent.Agent{build(t, m, nil, policy.Func(approvalAbove))},
		append([]runner.Option{runner.WithLease(clk.lease), runner.WithDrainWindow(time.Second)}, clk.options(nil)...)...)
	if err != nil {
		t.Fatal(err)
	}
	clk.follow()
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	ready := make(chan error, 1)
	go func() { ready <- api.NewClient(nc).Ready(c) }()
	select {
	case <-done:
		t.Fatalf("the runner stopped on a failed heartbeat: %v", runErr)
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Get(c, r.ID()); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("liveness key while the bucket refuses writes: %v, want none", err)
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "hb", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("hb", aggregate.StatusFinished)

	if _, err := h.srv.JS.UpdateStream(c, declared); err != nil {
		t.Fatal(err)
	}
	// The bucket accepts writes: the runner's next heartbeat puts its key
	// (a step waits for the runner's view to see it).
	clk.advanceUntil(t, "the runner heartbeated once the bucket accepted writes again", 20, func() bool {
		_, err := kv.Get(c, r.ID())
		return err == nil
	})
	select {
	case <-done:
		t.Fatalf("the runner stopped: %v", runErr)
	default:
	}
}

// A runner started while its server restarts (docs/semantics.md §8: a server
// restart stops nobody, after the first connection)
// waits for the server and then serves, instead of returning from Run
// because its buckets could not be looked up in time (cmd/runner then
// exited).
func TestRunnerStartedWhileTheServerIsDownServesOnceItIsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	nc := h.srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h.srv.Stop()
	m := model.NewScripted("s", model.Answer("ok"))
	r, err := runner.New(nc, js, []*agent.Agent{build(t, m, nil, policy.Func(approvalAbove))}, runner.WithLease(2*time.Second), runner.WithDrainWindow(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = r.Run(rctx) }()
	defer func() { stop(); <-done }()
	// Down for longer than a JetStream request's default timeout (5 s):
	// the client's time, which a fake ownership clock does not move.
	select {
	case <-done:
		t.Fatalf("Run returned while the server was down: %v", runErr)
	case <-time.After(6 * time.Second):
	}
	h.srv.StartAgain()
	h.client = api.NewClient(h.srv.Conn)
	c := ctx(t)
	ready := make(chan error, 1)
	go func() { ready <- h.client.Ready(c) }()
	select {
	case <-done:
		t.Fatalf("Run returned: %v", runErr)
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "down", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("down", aggregate.StatusFinished)
	stop() // drained while the server is up
	<-done
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
}
