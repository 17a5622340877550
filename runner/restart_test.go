package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Tests of docs/semantics.md §14 (restart from a step) on a real embedded
// server: the bodies tool counts every body start, so an effect run again
// would show as one start too many.

// transcripts records the transcript each run's model request of a turn
// was made with.
type transcripts struct {
	mu   sync.Mutex
	seen map[string][]model.Message
}

func (ts *transcripts) step(then model.Step) model.Step {
	return func(ctx context.Context, req model.Request) (model.Reply, error) {
		ts.mu.Lock()
		if ts.seen == nil {
			ts.seen = map[string][]model.Message{}
		}
		ts.seen[req.Run] = slices.Clone(req.Transcript)
		ts.mu.Unlock()
		return then(ctx, req)
	}
}

func (ts *transcripts) of(run string) []model.Message {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.seen[run]
}

func (h *harness) restart(req api.RestartRequest) (api.StartReply, error) {
	h.t.Helper()
	return h.client.Restart(ctx(h.t), req)
}

// toolResults are the results of a transcript's tool messages, by call id.
func toolResults(msgs []model.Message) map[string]string {
	out := map[string]string{}
	for _, m := range msgs {
		for _, r := range m.Results {
			out[r.CallID] = string(r.Content)
		}
	}
	return out
}

// TestSemantics14_ARestartRerunsNoEffectBeforeItsForkPoint: a run pays
// twice (turns 1 and 2) and answers (turn 3). Restarted from turn 3, the
// new run runs no body: its model reads both payments' results from the
// copied transcript. Restarted from turn 2, only turn 2's payment runs
// again (it is after the fork point); turn 1's does not. The new run's
// first message records where it came from, and a repeated restart (same
// command id) answers the same and starts nothing.
func TestSemantics14_ARestartRerunsNoEffectBeforeItsForkPoint(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var turn2, turn3 transcripts
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "ok")),
		turn2.step(model.CallTools(payCall(2, "ok"))),
		turn3.step(model.Answer("paid twice")))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(allow)), "parent", "pay 1 then 2")
	parent, out := finished(t, h, "parent")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 2 {
		t.Fatalf("parent: outcome %+v, body starts %d", out, b.starts.Load())
	}

	rep, err := h.restart(api.RestartRequest{CommandID: "rs-1", Run: "from3", From: api.RestartFrom{Run: "parent", Turn: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Run != "from3" {
		t.Fatalf("restart answered run %q", rep.Run)
	}
	s, out := finished(t, h, "from3")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 2 || len(s.Actions()) != 0 || s.Turn() != 3 {
		t.Fatalf("restart from turn 3: outcome %+v, body starts %d (want 2: nothing run again), actions %d, turns %d", out, b.starts.Load(), len(s.Actions()), s.Turn())
	}
	got := toolResults(turn3.of("from3"))
	want := toolResults(turn3.of("parent"))
	if len(want) != 2 || !maps(got, want) {
		t.Fatalf("the restarted run's model read results %v, the parent's %v", got, want)
	}
	if f := s.ForkedFrom(); f == nil || f.Run != "parent" || f.Turn != 3 || f.Version != parent.Version() {
		t.Fatalf("forked_from %+v, want parent at version %d turn 3", f, parent.Version())
	}
	envs, _, err := h.srv.Log.Load(ctx(t), "from3")
	if err != nil {
		t.Fatal(err)
	}
	var first []events.Name
	for _, env := range envs {
		if env.Version <= 3 {
			first = append(first, env.Type)
		}
	}
	if !slices.Equal(first, []events.Name{events.NameRunStarted, events.NameRunForked, events.NameModelRequested}) {
		t.Fatalf("the restarted run's first events: %v", first)
	}

	// The same command again answers the same and records nothing; a new
	// command for the same new run id is already_started.
	v := h.state("from3").Version()
	if again, err := h.restart(api.RestartRequest{CommandID: "rs-1", Run: "from3", From: api.RestartFrom{Run: "parent", Turn: 3}}); err != nil || again != rep {
		t.Fatalf("repeated restart: %+v, %v; first %+v", again, err, rep)
	}
	if _, err := h.restart(api.RestartRequest{CommandID: "rs-2", Run: "from3", From: api.RestartFrom{Run: "parent", Turn: 3}}); !isCode(err, weft.CodeAlreadyStarted) {
		t.Fatalf("restart under an existing run id: %v", err)
	}
	if h.state("from3").Version() != v || b.starts.Load() != 2 {
		t.Fatalf("a repeated restart recorded or ran something: version %d → %d, body starts %d", v, h.state("from3").Version(), b.starts.Load())
	}

	// From turn 2: turn 1's payment is in the transcript, turn 2's is asked
	// again and runs once more.
	if _, err := h.restart(api.RestartRequest{CommandID: "rs-3", Run: "from2", From: api.RestartFrom{Run: "parent", Turn: 2}}); err != nil {
		t.Fatal(err)
	}
	s, out = finished(t, h, "from2")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 3 {
		t.Fatalf("restart from turn 2: outcome %+v, body starts %d (want 3: turn 2's payment only)", out, b.starts.Load())
	}
	acts := s.Actions()
	if len(acts) != 1 || acts[0].Turn != 2 {
		t.Fatalf("restart from turn 2: actions %+v, want turn 2's only", acts)
	}
	if got, want := toolResults(turn2.of("from2")), toolResults(turn2.of("parent")); len(want) != 1 || !maps(got, want) {
		t.Fatalf("turn 2 of the restarted run read %v, the parent's %v", got, want)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSemantics14_ARestartPastAnUncertainActionIsRefusedUntilReconciled: a
// payment whose outcome nobody knows, its run cancelled: a restart after
// it is refused uncertain_actions naming it, nothing started; reconciled
// (reconcile_stored), the restart is accepted and its model reads the
// reconciled result, the payment not run again. A restart of a run that
// has not finished is refused run_not_finished, one from a turn the run
// never had wrong_reference.
func TestSemantics14_ARestartPastAnUncertainActionIsRefusedUntilReconciled(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var turn2 transcripts
	m := model.NewScripted("s", model.CallTools(payCall(1, "uncertain")), turn2.step(model.Answer("done")))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(allow)), "u1", "pay 1")
	s := h.waitStatus("u1", aggregate.StatusSuspended)
	act := s.Actions()[0].ID
	if _, err := h.restart(api.RestartRequest{CommandID: "r-live", Run: "u1-again", From: api.RestartFrom{Run: "u1", Turn: 1}}); !isCode(err, weft.CodeRunNotFinished) {
		t.Fatalf("restart of a suspended run: %v", err)
	}
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c-1", Run: "u1", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "u1")
	_, err := h.restart(api.RestartRequest{CommandID: "r-1", Run: "u2", From: api.RestartFrom{Run: "u1", Turn: 2}})
	var we *weft.Error
	if !isCode(err, weft.CodeUncertainActions) || !errors.As(err, &we) || !slices.Equal(we.Actions, []string{act}) {
		t.Fatalf("restart past an uncertain action: %v (actions %v), want uncertain_actions naming %s", err, actionsOf(we), act)
	}
	if _, err := h.restart(api.RestartRequest{CommandID: "r-2", Run: "u2", From: api.RestartFrom{Run: "u1", Turn: 3}}); !isCode(err, weft.CodeWrongReference) {
		t.Fatalf("restart from turn 3 of a run of 1: %v", err)
	}
	if _, err := h.client.ReconcileStored(ctx(t), api.ReconcileRequest{CommandID: "rc-1", Run: "u1", Action: act, Content: json.RawMessage(`{"id":"pay-confirmed"}`), By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.restart(api.RestartRequest{CommandID: "r-3", Run: "u2", From: api.RestartFrom{Run: "u1", Turn: 2}}); err != nil {
		t.Fatal(err)
	}
	_, out := finished(t, h, "u2")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 {
		t.Fatalf("restart after the reconciliation: outcome %+v, body starts %d (want 1)", out, b.starts.Load())
	}
	if got := toolResults(turn2.of("u2")); len(got) != 1 || got["call_1_1"] != `{"id":"pay-confirmed"}` {
		t.Fatalf("the restarted run's model read %v, want the reconciled result", got)
	}
}

func actionsOf(we *weft.Error) []string {
	if we == nil {
		return nil
	}
	return we.Actions
}

// TestSemantics14_ARestartIsStartedByTheOwnerOfTheNewRunsPartition: a
// restart received by a runner that does not own the new run's partition
// is judged there and forwarded with its fork to the owner, which starts
// the run (its run_started names the owner) with the copied transcript:
// no body runs again.
func TestSemantics14_ARestartIsStartedByTheOwnerOfTheNewRunsPartition(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var turn2 transcripts
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), turn2.step(model.Answer("paid")))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	owner, other := keeping("fwd-new")
	h.startRunner([]*agent.Agent{a}, runner.WithID(owner))
	receiver, _ := h.startRunner([]*agent.Agent{a}, runner.WithID(other))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "fwd-parent", Agent: a.Name(), Input: "pay 1"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "fwd-parent")
	// Every command forwarded to the owner, as the owner receives it.
	kinds := make(chan string, 16)
	sub, err := h.srv.Conn.Subscribe(runner.ForwardPrefix+owner+".cmd", func(m *nats.Msg) {
		var f struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(m.Data, &f) == nil && f.Kind != "wake" {
			select {
			case kinds <- f.Kind:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	rep, err := receiver.Restart(ctx(t), api.RestartRequest{Schema: api.Schema, CommandID: "fwd-1", Run: "fwd-new", From: api.RestartFrom{Run: "fwd-parent", Turn: 2}})
	if err != nil || rep.Run != "fwd-new" {
		t.Fatalf("restart through %s: %+v, %v", other, rep, err)
	}
	// Forwarded under its own kind: a runner that does not know restarts
	// refuses it (unknown forwarded command) instead of starting the run
	// fresh, which would run every effect before the fork point again.
	if k := <-kinds; k != api.EndpointRestart {
		t.Fatalf("the restart was forwarded as %q, want %q", k, api.EndpointRestart)
	}
	// A forwarded start never carries a fork: it is refused, nothing starts.
	body, _ := json.Marshal(map[string]any{"request": api.StartRequest{Schema: api.Schema, CommandID: "fwd-2", Run: "fwd-plain", Agent: a.Name(), Input: "pay 1"},
		"fork": events.RunForked{From: events.ForkedFrom{Run: "fwd-parent", Version: 1, Turn: 2}}})
	fwd, _ := json.Marshal(map[string]any{"kind": api.EndpointStart, "run": "fwd-plain", "body": json.RawMessage(body)})
	msg, err := h.srv.Conn.RequestWithContext(ctx(t), runner.ForwardPrefix+owner+".cmd", fwd)
	if err != nil {
		t.Fatal(err)
	}
	var er api.ErrorReply
	if err := json.Unmarshal(msg.Data, &er); err != nil || er.Error == nil || er.Error.Code != weft.CodeInvalidRequest {
		t.Fatalf("a forwarded start with a fork: %s (%v), want invalid_request", msg.Data, err)
	}
	if h.state("fwd-plain").Exists() {
		t.Fatal("a forwarded start with a fork started a run")
	}
	s, out := finished(t, h, "fwd-new")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 || s.Started().Runner != owner || s.ForkedFrom() == nil {
		t.Fatalf("forwarded restart: outcome %+v, body starts %d, started by %s (want %s), forked_from %+v", out, b.starts.Load(), s.Started().Runner, owner, s.ForkedFrom())
	}
	if got, want := toolResults(turn2.of("fwd-new")), toolResults(turn2.of("fwd-parent")); len(want) != 1 || !maps(got, want) {
		t.Fatalf("the forwarded restart's model read %v, the parent's %v", got, want)
	}
}

// TestSemantics14_ARestartPastADelegationJudgesTheChildsActions: a
// delegation is an action (docs/semantics.md §1), so its child's effects
// are before the fork point too. The child's payment is uncertain, the
// child is answered with an open question and completes, and so does the
// parent: a restart of the parent after the delegation is refused
// uncertain_actions naming the child's action (<child>/<action>); once the
// question is resolved it is accepted, and the payment is not made again.
func TestSemantics14_ARestartPastADelegationJudgesTheChildsActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	child := researcherAgent(t, &b, model.CallTools(payCall(5, "uncertain")), model.Answer("maybe paid"))
	parent := build(t, model.NewScripted("desk",
		model.CallTools(model.Call("researcher", `{"input":"pay invoice 7"}`)),
		echoResults, echoResults,
	), []tools.Tool{agent.Delegate(child, "Pays invoices.")}, policy.Func(allow))
	h.startRunner([]*agent.Agent{parent})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "dp1", Agent: "desk", Input: "pay invoice 7"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("dp1", "its delegation", func(s aggregate.State) bool {
		a, ok := s.Action("1/call_1_1")
		return ok && a.Child != nil
	})
	a, _ := s.Action("1/call_1_1")
	kid := a.Child.Child
	cs := h.waitStatus(kid, aggregate.StatusSuspended)
	pay := cs.Actions()[0].ID
	if _, err := h.client.Reconcile(ctx(t), api.ReconcileRequest{CommandID: "rc-1", Run: kid, Action: pay, Content: json.RawMessage(`{"unconfirmed":"ask the bank"}`), By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "dp1"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("parent: %+v", out)
	}
	_, err := h.restart(api.RestartRequest{CommandID: "r-1", Run: "dp2", From: api.RestartFrom{Run: "dp1", Turn: 2}})
	var we *weft.Error
	if want := kid + "/" + pay; !isCode(err, weft.CodeUncertainActions) || !errors.As(err, &we) || !slices.Equal(we.Actions, []string{want}) {
		t.Fatalf("restart past a child holding an open question: %v (actions %v), want uncertain_actions naming %s", err, actionsOf(we), want)
	}
	if h.state("dp2").Exists() {
		t.Fatal("a refused restart started its run")
	}
	if _, err := h.client.Resolve(ctx(t), api.ResolveRequest{CommandID: "rs-1", Run: kid, Action: pay, Content: json.RawMessage(`{"id":"pay-5"}`), By: "erin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.restart(api.RestartRequest{CommandID: "r-2", Run: "dp2", From: api.RestartFrom{Run: "dp1", Turn: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "dp2"); out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 {
		t.Fatalf("restart after the resolution: outcome %+v, payment bodies started %d (want 1)", out, b.starts.Load())
	}
}

// TestSemantics14_ARestartFromARunBeingPurgedIsRefused: a restart whose
// run retention started to remove (its weft_purges marker, written before
// the purge) is refused conflict and starts nothing: a fork started then
// would be live while its parent's log goes.
func TestSemantics14_ARestartFromARunBeingPurgedIsRefused(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("done"))
	h := one(t, build(t, m, nil, policy.Func(allow)), "p1", "go")
	finished(t, h, "p1")
	kv, err := h.srv.JS.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: protocol.PurgesBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), "p1", []byte(`{"state":"purging"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.restart(api.RestartRequest{CommandID: "r-1", Run: "p1-again", From: api.RestartFrom{Run: "p1", Turn: 1}}); !isCode(err, weft.CodeConflict) {
		t.Fatalf("restart of a run being purged: %v, want conflict", err)
	}
	if head, err := h.srv.Log.Head(ctx(t), "p1-again"); err != nil || !head.IsZero() {
		t.Fatalf("the refused restart started p1-again: head %+v, %v", head, err)
	}
}
