package runner_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (recovery finds every unfinished run whose driver is
// gone):
// a runner ("ghost") was killed between the run_started append and its
// weft_drivers put, so the run has only run_started and model_requested in
// the log and no key in weft_drivers. Which runs are unfinished and who
// drives them is derived from the log: a runner that starts rebuilds the
// missing key, takes the run over and completes it.
func TestRecoveryFindsEveryUnfinishedRun_StartWithoutDriverKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := model.NewRules("s", model.Rule{Name: "done", Match: func(model.Request) bool { return true }, Step: model.Answer("done")})
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	var s aggregate.State
	appendDecided(t, h, "st1", &s, aggregate.Start{Run: "st1", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	if w := aggregate.Pending(s); w.Model == nil {
		t.Fatalf("crafted history: no model call pending")
	}
	h.startRunner([]*agent.Agent{a})
	if _, out := finished(t, h, "st1"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
}

// The driver of a run is written as an intent before the run_started
// append: a started run has its weft_drivers key from its first event on.
// The key is read while the run's tool body hangs (work in flight keeps
// it), not watched: a watch races what it observes — once the run
// suspends, the key is purged, and a watch whose consumer had not yet
// delivered the put sees only the removal (driver key "").
func TestRecoveryFindsEveryUnfinishedRun_DriverKeyBeforeStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, model.NewScripted("s", model.CallTools(payCall(50, "hang"))), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	r, _ := h.startRunner([]*agent.Agent{a})
	kv, err := h.srv.JS.KeyValue(ctx(t), runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "st2", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("st2", "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	e, err := kv.Get(ctx(t), runner.DriverKey("st2", runner.DefaultPartitions))
	if err != nil {
		t.Fatalf("driver key of a run with its body in flight: %v", err)
	}
	if string(e.Value()) != r.ID() {
		t.Fatalf("driver key %q, want %s", e.Value(), r.ID())
	}
	stored := e.Created() // the server's time of the key's message
	// Both times are the server's: the key's message and the run's first
	// log message.
	evs, err := h.srv.JS.Stream(ctx(t), provision.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	started, err := evs.GetMsg(ctx(t), 1, jetstream.WithGetMsgSubject(eventlog.Subject("st2")))
	if err != nil {
		t.Fatal(err)
	}
	if started.Time.Before(stored) {
		t.Fatalf("driver key stored at %s, after run_started (stored at %s)", stored, started.Time)
	}
}
