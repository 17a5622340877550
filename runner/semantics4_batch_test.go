package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Batch decisions (weft.api.decide, docs/protocol/40-commands.md): each
// item is checked as a single answer is (docs/semantics.md §4), each run's
// items are recorded all or nothing in one append, runs are independent,
// and no batch answers a request twice.

// pendingOf waits until run has n pending approvals and returns them in
// action order.
func pendingOf(h *harness, run string, n int) []aggregate.Action {
	h.t.Helper()
	s := h.waitFor(run, fmt.Sprintf("%d pending approvals", n), func(s aggregate.State) bool {
		return len(aggregate.Status(s).Approvals) == n
	})
	var out []aggregate.Action
	for _, a := range s.Actions() {
		if a.State == aggregate.ActionAwaitingApproval {
			out = append(out, a)
		}
	}
	return out
}

func approveItem(run string, a aggregate.Action) api.DecideItem {
	return api.DecideItem{Run: run, Action: a.ID, Revision: a.Request.Revision, Answer: events.AnswerApprove, Approver: "desk", Credential: "alice"}
}

// answerMessages returns, for each message of run's log that holds an
// approval_answered event, how many it holds: one entry per append.
func (h *harness) answerMessages(run string) []int {
	h.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := h.srv.JS.Stream(c, provision.EventsStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(c)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []int
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(c, seq)
		if err != nil {
			continue // deleted
		}
		if !strings.HasPrefix(m.Subject, "weft.ev."+run+".") {
			continue
		}
		var body struct {
			Events []events.Envelope `json:"events"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil {
			h.t.Fatalf("message %d: %v", seq, err)
		}
		n := 0
		for _, e := range body.Events {
			if e.Type == events.Name("approval_answered") {
				n++
			}
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func TestSemantics4_BatchIsAllOrNothingWithinARun(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "rb1", "pay both")
	p := pendingOf(h, "rb1", 2)
	c := ctx(t)

	// One item refused (a revision never issued): the other is valid but
	// not recorded, and says because of which.
	bad := approveItem("rb1", p[1])
	bad.Revision = 99
	rep, err := h.client.Decide(c, api.DecideRequest{BatchID: "b-refused", Items: []api.DecideItem{approveItem("rb1", p[0]), bad}})
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Items[0]; o.Outcome != api.OutcomeNotRecorded || !reflect.DeepEqual(o.Because, []string{p[1].ID}) {
		t.Fatalf("item 0: %+v", o)
	}
	if o := rep.Items[1]; o.Outcome != api.OutcomeRefused || o.Error == nil || o.Error.Code != weft.CodeStaleReference {
		t.Fatalf("item 1: %+v", o)
	}
	if got := h.answerMessages("rb1"); len(got) != 0 {
		t.Fatalf("a refused batch recorded answers: %v", got)
	}
	for _, a := range h.state("rb1").Actions() {
		if a.State != aggregate.ActionAwaitingApproval || len(a.Answers) != 0 {
			t.Fatalf("action %s after a refused batch: %s, answers %+v", a.ID, a.State, a.Answers)
		}
	}

	// Both valid: recorded in one append, each body runs once.
	batch := api.DecideRequest{BatchID: "b-ok", Items: []api.DecideItem{approveItem("rb1", p[0]), approveItem("rb1", p[1])}}
	rep, err = h.client.Decide(c, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range rep.Items {
		if o.Outcome != api.OutcomeAnswered {
			t.Fatalf("item %d: %+v", i, o)
		}
	}
	finished(t, h, "rb1")
	if got := h.answerMessages("rb1"); !reflect.DeepEqual(got, []int{2}) {
		t.Fatalf("approval_answered per append = %v, want [2] (one decision, one append)", got)
	}
	// The same batch id again answers the same, and records nothing.
	again, err := h.client.Decide(c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, rep) {
		t.Fatalf("repeated batch answered %+v, first %+v", again, rep)
	}
	if got := h.answerMessages("rb1"); !reflect.DeepEqual(got, []int{2}) || b.starts.Load() != 2 {
		t.Fatalf("after the repeat: answers per append %v, bodies started %d (want [2], 2)", got, b.starts.Load())
	}
}

func TestSemantics4_BatchRunsAreIndependent(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	for _, run := range []string{"rb2a", "rb2b"} {
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := pendingOf(h, "rb2a", 1), pendingOf(h, "rb2b", 1)
	bad := approveItem("rb2b", pb[0])
	bad.Credential = "" // the trusting approver refuses an empty credential
	rep, err := h.client.Decide(c, api.DecideRequest{BatchID: "b-two", Items: []api.DecideItem{approveItem("rb2a", pa[0]), bad}})
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Items[0]; o.Outcome != api.OutcomeAnswered {
		t.Fatalf("run rb2a's item: %+v", o)
	}
	if o := rep.Items[1]; o.Outcome != api.OutcomeRefused || o.Error == nil || o.Error.Code != weft.CodeProofRefused {
		t.Fatalf("run rb2b's item: %+v", o)
	}
	if _, out := finished(t, h, "rb2a"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("rb2a: %+v", out)
	}
	if got := h.answerMessages("rb2b"); len(got) != 0 {
		t.Fatalf("rb2b recorded answers: %v", got)
	}
	if st := aggregate.Status(h.state("rb2b")); st.Kind != aggregate.StatusSuspended || len(st.Approvals) != 1 {
		t.Fatalf("rb2b: %+v", st)
	}
}

func TestSemantics4_BatchRacingASingleAnswerOneWins(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	// Two calls: the second stays pending, so the run stays live and the
	// loser of the race over the first is refused already_answered.
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(700, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	const races = 4
	for i := range races {
		run := fmt.Sprintf("rb3-%d", i)
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
		first := pendingOf(h, run, 2)[0]
		var wg sync.WaitGroup
		var rep api.DecideReply
		var berr, serr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			rep, berr = h.client.Decide(c, api.DecideRequest{BatchID: "b-" + run, Items: []api.DecideItem{approveItem(run, first)}})
		}()
		go func() {
			defer wg.Done()
			_, serr = h.client.Approve(c, api.ApproveRequest{CommandID: "s-" + run, Run: run, Action: first.ID, Revision: first.Request.Revision, Approver: "desk", Credential: "bob"})
		}()
		wg.Wait()
		if berr != nil {
			t.Fatal(berr)
		}
		batchWon := rep.Items[0].Outcome == api.OutcomeAnswered
		switch {
		case batchWon && isCode(serr, weft.CodeAlreadyAnswered):
		case !batchWon && serr == nil && rep.Items[0].Error != nil && rep.Items[0].Error.Code == weft.CodeAlreadyAnswered:
		default:
			t.Fatalf("%s: batch %+v, single %v: want exactly one winner, the other already_answered", run, rep.Items[0], serr)
		}
		s := h.waitFor(run, "the first call's result", func(s aggregate.State) bool {
			a, _ := s.Action(first.ID)
			return a.State == aggregate.ActionSucceeded
		})
		if a, _ := s.Action(first.ID); len(a.Answers) != 1 {
			t.Fatalf("%s: answers %+v", run, a.Answers)
		}
	}
	if n := b.starts.Load(); n != races {
		t.Fatalf("bodies started %d times, want %d (once per race)", n, races)
	}
}

// reviewedAbove requires approval for amounts over 100, and at review
// (the approver's context) denies amounts over 550.
func reviewedAbove(ctx context.Context, a policy.Action) (policy.Decision, error) {
	in, matched, err := tools.Input(payDef, a)
	if err != nil {
		return policy.Decision{}, err
	}
	if _, review := policy.Reviewer(ctx); review && matched && in.Amount > 550 {
		return policy.Deny("over the reviewer's limit"), nil
	}
	return approvalAbove(ctx, a)
}

func TestSemantics4_BatchRechecksThePolicyPerItem(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(reviewedAbove)), "rb4", "pay both")
	p := pendingOf(h, "rb4", 2)
	rep, err := h.client.Decide(ctx(t), api.DecideRequest{BatchID: "b-policy", Items: []api.DecideItem{approveItem("rb4", p[0]), approveItem("rb4", p[1])}})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range rep.Items {
		if o.Outcome != api.OutcomeAnswered {
			t.Fatalf("item %d: %+v (an answer the re-run policy denies is recorded: Deny wins)", i, o)
		}
	}
	s, _ := finished(t, h, "rb4")
	if a, _ := s.Action(p[0].ID); a.State != aggregate.ActionSucceeded {
		t.Fatalf("500: %s", a.State)
	}
	if a, _ := s.Action(p[1].ID); a.State != aggregate.ActionDenied {
		t.Fatalf("600: %s, want denied by the policy re-run in the approver's context", a.State)
	}
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("bodies started %d times, want 1", n)
	}
}

func TestSemantics4_BatchOverTheItemLimitIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, model.NewScripted("s"), []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove))})
	items := make([]api.DecideItem, api.MaxBatchItems+1)
	for i := range items {
		items[i] = api.DecideItem{Run: "rb5", Action: fmt.Sprintf("1/call_1_%d", i), Revision: i + 1, Answer: events.AnswerApprove, Approver: "desk", Credential: "alice"}
	}
	_, err := h.client.Decide(ctx(t), api.DecideRequest{BatchID: "b-big", Items: items})
	if !isCode(err, weft.CodePayloadTooLarge) {
		t.Fatalf("%d items: %v, want payload_too_large", len(items), err)
	}
	_, err = h.client.Decide(ctx(t), api.DecideRequest{BatchID: "b-twice", Items: []api.DecideItem{items[0], items[0]}})
	if !isCode(err, weft.CodeInvalidRequest) {
		t.Fatalf("the same request twice: %v, want invalid_request", err)
	}
}

// A run's part forwarded to the run's driver (a batch that reached
// another runner) is answered there with an outcome per item, refused
// parts included, and never as an error reply that would lose them.
func TestSemantics4_BatchPartForwardedToTheDriver(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid"))
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "rb6", Agent: "desk", Input: "pay both"}); err != nil {
		t.Fatal(err)
	}
	p := pendingOf(h, "rb6", 2)
	send := func(items ...api.DecideItem) api.DecideRunReply {
		t.Helper()
		body, _ := json.Marshal(api.DecideRun{Run: "rb6", BatchID: "fwd", Items: items})
		msg, _ := json.Marshal(map[string]any{"kind": api.EndpointDecide, "run": "rb6", "body": json.RawMessage(body)})
		m, err := h.srv.Conn.Request(runner.ForwardPrefix+r.ID()+".cmd", msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep api.DecideRunReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || len(rep.Items) != len(items) {
			t.Fatalf("forwarded reply %s: %v", m.Data, err)
		}
		return rep
	}
	bad := approveItem("rb6", p[1])
	bad.Revision = 7
	rep := send(approveItem("rb6", p[0]), bad)
	if rep.Items[0].Outcome != api.OutcomeNotRecorded || rep.Items[1].Error == nil || rep.Items[1].Error.Code != weft.CodeStaleReference {
		t.Fatalf("refused part: %+v", rep.Items)
	}
	rep = send(approveItem("rb6", p[0]), approveItem("rb6", p[1]))
	if rep.Items[0].Outcome != api.OutcomeAnswered || rep.Items[1].Outcome != api.OutcomeAnswered {
		t.Fatalf("valid part: %+v", rep.Items)
	}
	finished(t, h, "rb6")
	if n := b.starts.Load(); n != 2 {
		t.Fatalf("bodies started %d times, want 2", n)
	}
}

// A repeated batch (same batch id) answers each run's part as it was
// kept: a part that was decided is not decided again (its answer stays
// the only one), while a part refused for a retry (its approver did not
// answer: unavailable) is not kept, and the repeat decides it.
func TestSemantics4_RepeatedBatchDecidesOnlyThePartsNotApplied(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	flaky := approvers.New("flaky", func(_ context.Context, credential string, _ policy.Requirement) (string, error) {
		if down.Load() {
			return "", approvers.Unavailable("the identity provider is down")
		}
		return credential, nil
	})
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithApprovers(approvers.Trusting("desk"), flaky))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	for _, run := range []string{"rb7a", "rb7b"} {
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	viaFlaky := approveItem("rb7b", pendingOf(h, "rb7b", 1)[0])
	viaFlaky.Approver = "flaky"
	batch := api.DecideRequest{BatchID: "b-retry", Items: []api.DecideItem{approveItem("rb7a", pendingOf(h, "rb7a", 1)[0]), viaFlaky}}
	rep, err := h.client.Decide(c, batch) // h.client sends once: no retry of its own
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items[0].Outcome != api.OutcomeAnswered || rep.Items[1].Error == nil || rep.Items[1].Error.Code != weft.CodeUnavailable {
		t.Fatalf("first: %+v", rep.Items)
	}
	down.Store(false)
	rep, err = h.client.Decide(c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items[0].Outcome != api.OutcomeAnswered || rep.Items[1].Outcome != api.OutcomeAnswered {
		t.Fatalf("repeat: %+v", rep.Items)
	}
	finished(t, h, "rb7a")
	finished(t, h, "rb7b")
	if ga, gb := h.answerMessages("rb7a"), h.answerMessages("rb7b"); !reflect.DeepEqual(ga, []int{1}) || !reflect.DeepEqual(gb, []int{1}) || b.starts.Load() != 2 {
		t.Fatalf("answers per append: rb7a %v, rb7b %v; bodies %d (want [1], [1], 2)", ga, gb, b.starts.Load())
	}
}

// A decide body that also carries a top-level command_id and run (refused
// invalid_request: unknown fields) keeps its refusal under its own key,
// never under a batch part's: the batch with that id for that run is
// still decided (docs/protocol/40-commands.md, "Idempotency"). Before,
// both hashed the same, and the genuine batch was answered with the kept
// invalid_request.
func TestSemantics4_BatchKeyIsNotACommandID(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "rb8", "pay")
	p := pendingOf(h, "rb8", 1)
	c := ctx(t)
	item, _ := json.Marshal(approveItem("rb8", p[0]))
	body := []byte(fmt.Sprintf(`{"schema":1,"command_id":"b-shared","run":"rb8","items":[%s]}`, item))
	msg, err := api.Request(c, h.srv.Conn, api.SubjectPrefix+api.EndpointDecide, body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg.Data), string(weft.CodeInvalidRequest)) {
		t.Fatalf("a body with command_id and run: %s, want invalid_request", msg.Data)
	}
	rep, err := h.client.Decide(c, api.DecideRequest{BatchID: "b-shared", Items: []api.DecideItem{approveItem("rb8", p[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Items[0]; o.Outcome != api.OutcomeAnswered {
		t.Fatalf("the batch after it: %+v, want answered", o)
	}
	finished(t, h, "rb8")
}

// A batch id reused with other items for a run never reports one item's
// outcome under another's name (docs/protocol/40-commands.md,
// "Idempotency"): the part is kept under the batch id and a digest of its
// items, so the other items are decided as what they are. Before, the kept
// reply was copied by position: the second batch's reject of the other
// action was reported as the first batch's approve, answered, while
// nothing was decided.
func TestSemantics4_BatchIDReusedWithOtherItems(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "rb9", "pay both")
	p := pendingOf(h, "rb9", 2)
	c := ctx(t)
	first, err := h.client.Decide(c, api.DecideRequest{BatchID: "b-reused", Items: []api.DecideItem{approveItem("rb9", p[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if o := first.Items[0]; o.Outcome != api.OutcomeAnswered || o.Action != p[0].ID {
		t.Fatalf("first batch: %+v", o)
	}
	rej := api.DecideItem{Run: "rb9", Action: p[1].ID, Revision: p[1].Request.Revision, Answer: events.AnswerReject, Reason: "not this one", Approver: "desk", Credential: "alice"}
	second, err := h.client.Decide(c, api.DecideRequest{BatchID: "b-reused", Items: []api.DecideItem{rej}})
	if err != nil {
		t.Fatal(err)
	}
	if o := second.Items[0]; o.Action != p[1].ID || o.Answer != events.AnswerReject || o.Outcome != api.OutcomeAnswered {
		t.Fatalf("second batch, same id, other item: %+v, want %s rejected and answered", o, p[1].ID)
	}
	s, _ := finished(t, h, "rb9")
	if a, _ := s.Action(p[1].ID); a.State != aggregate.ActionRejected {
		t.Fatalf("%s: %s, want rejected", p[1].ID, a.State)
	}
}

// failsAtReviewAbove requires approval for amounts over 100 and, at review
// (the approver's context), fails for amounts over 550.
func failsAtReviewAbove(ctx context.Context, a policy.Action) (policy.Decision, error) {
	in, matched, err := tools.Input(payDef, a)
	if err != nil {
		return policy.Decision{}, err
	}
	if _, review := policy.Reviewer(ctx); review && matched && in.Amount > 550 {
		return policy.Decision{}, fmt.Errorf("limits service down")
	}
	return approvalAbove(ctx, a)
}

// An approval whose policy re-run fails, in a batch with other items of
// its run, is refused on its own name (invalid_request, saying the policy
// failed and to answer it alone: alone, it ends the run failed,
// docs/semantics.md §4), the others are not recorded because of it, and
// the run is unchanged — whatever the items' order
// (docs/protocol/40-commands.md). Before, with the failing item first the
// later ones were refused run_ended on a live run, and with it last the
// part was recorded and the run failed.
func TestSemantics4_BatchPolicyFailureIsRefusedOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, failingFirst := range []bool{true, false} {
		run := fmt.Sprintf("rb10-%t", failingFirst)
		m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid"))
		h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(failsAtReviewAbove)), run, "pay both")
		p := pendingOf(h, run, 2)
		ok, failing := approveItem(run, p[0]), approveItem(run, p[1])
		items := []api.DecideItem{ok, failing}
		if failingFirst {
			items = []api.DecideItem{failing, ok}
		}
		rep, err := h.client.Decide(ctx(t), api.DecideRequest{BatchID: "b-" + run, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range rep.Items {
			switch o.Action {
			case p[1].ID:
				if o.Outcome != api.OutcomeRefused || o.Error == nil || o.Error.Code != weft.CodeInvalidRequest || !strings.Contains(o.Error.Message, "policy") {
					t.Fatalf("failing first %t: the failing item %+v, want refused invalid_request naming the policy", failingFirst, o)
				}
			default:
				if o.Outcome != api.OutcomeNotRecorded || !reflect.DeepEqual(o.Because, []string{p[1].ID}) {
					t.Fatalf("failing first %t: the other item %+v, want not_recorded because of %s", failingFirst, o, p[1].ID)
				}
			}
		}
		if got := h.answerMessages(run); len(got) != 0 {
			t.Fatalf("failing first %t: answers recorded %v", failingFirst, got)
		}
		if st := aggregate.Status(h.state(run)); st.Kind != aggregate.StatusSuspended {
			t.Fatalf("failing first %t: run is %s, want still suspended", failingFirst, st.Kind)
		}
	}
}

// slowReview requires approval for amounts over 100 and takes 400 ms to
// decide at review (the approver's context).
func slowReview(ctx context.Context, a policy.Action) (policy.Decision, error) {
	if _, review := policy.Reviewer(ctx); review {
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
			return policy.Decision{}, ctx.Err()
		}
	}
	return approvalAbove(ctx, a)
}

// A run's part whose checks are slow (its policy) is answered with a
// definite, documented refusal once they pass half the agent's command
// timeout: the items not checked are refused payload_too_large, saying to
// send fewer, the others not_recorded, nothing recorded, the run
// unchanged (docs/protocol/40-commands.md). Before, every item was checked
// under the request's deadline whatever it took, holding the run, and a
// part past it was answered unavailable (retried in vain).
func TestSemantics4_BatchSlowChecksAreRefusedDefinitely(t *testing.T) {
	t.Parallel()
	calls := make([]model.ToolCall, 6)
	for i := range calls {
		calls[i] = payCall(int64(200+i), "ok")
	}
	m := model.NewScripted("s", model.CallTools(calls...), model.Answer("paid"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(slowReview), agent.WithCommandTimeout(2*time.Second), agent.WithPolicyTimeout(time.Second))
	h := one(t, a, "rb11", "pay six")
	p := pendingOf(h, "rb11", len(calls))
	var items []api.DecideItem
	for _, a := range p {
		items = append(items, approveItem("rb11", a))
	}
	rep, err := h.client.Decide(ctx(t), api.DecideRequest{BatchID: "b-slow", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Items[len(items)-1]; o.Outcome != api.OutcomeRefused || o.Error == nil || o.Error.Code != weft.CodePayloadTooLarge || !strings.Contains(o.Error.Message, "send fewer") {
		t.Fatalf("the last item (checked past the budget): %+v, want refused payload_too_large saying to send fewer", o)
	}
	for i, o := range rep.Items {
		if o.Outcome == api.OutcomeAnswered || o.Error != nil && o.Error.Code != weft.CodePayloadTooLarge {
			t.Fatalf("item %d: %+v, want not_recorded or payload_too_large", i, o)
		}
	}
	if got := h.answerMessages("rb11"); len(got) != 0 {
		t.Fatalf("answers recorded %v", got)
	}
	if st := aggregate.Status(h.state("rb11")); st.Kind != aggregate.StatusSuspended {
		t.Fatalf("run is %s, want still suspended", st.Kind)
	}
}
