package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// narrowPolicy allows a payment up to 100, requires finance up to 500 and
// treasury up to 1000, and denies more.
func narrowPolicy(_ context.Context, a policy.Action) (policy.Decision, error) {
	in, matched, err := tools.Input(payDef, a)
	if err != nil || !matched {
		return policy.Decision{}, err
	}
	switch {
	case in.Amount <= 100:
		return policy.Allow(), nil
	case in.Amount <= 500:
		return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
	case in.Amount <= 1000:
		return policy.RequireApproval(policy.Requirement{Name: "treasury", Version: 1}), nil
	}
	return policy.Deny("over the limit"), nil
}

// amounts records the amount every body of "pay" was started with.
type amounts struct {
	mu  sync.Mutex
	got []int64
}

func (b *amounts) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		b.mu.Lock()
		b.got = append(b.got, in.Amount)
		b.mu.Unlock()
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

func (b *amounts) list() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.got...)
}

func wantCode(t *testing.T, what string, err error, code weft.Code, reason string) {
	t.Helper()
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != code || we.Reason != reason {
		t.Fatalf("%s: %v, want %s(%s)", what, err, code, reason)
	}
}

// TestSemantics4_ApproveNarrower (docs/semantics.md §4, "Approving narrower
// arguments"), on a real server: an approve with edited arguments that
// the tool's input schema refuses is refused invalid_content, one the
// policy denies or would put under another approval is refused
// edit_refused, and a signed proof of the model's arguments used with an
// edit is refused other_arguments — each recording nothing. A proof that
// covers the lower amount approves it: the body receives the edited
// amount, never the model's; the log records the model's arguments with
// the call and the approved ones with the answer; the model reads its
// result with the note and the arguments the call ran with — the same
// bytes the log folds to; the audit re-verifies the proof offline and the
// run view shows the approved arguments.
func TestSemantics4_ApproveNarrower(t *testing.T) {
	h := newHarness(t)
	b := &amounts{}
	alice, alicePub := userKey(t, 1)
	m := model.NewScripted("s", model.CallTools(payCall(400, "ok")), model.Answer("paid"))
	ag, err := agent.New("desk", m, []tools.Tool{b.tool()}, policy.Func(narrowPolicy), agent.WithApprovers(
		approvers.Signed("keys", []approvers.Key{{Public: alicePub, Reviewer: "alice@bank", Requirements: []string{"finance"}}}, approvers.WithLifetime(5*time.Minute)),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h.startRunner([]*agent.Agent{ag})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "narrow", Agent: "desk", Input: "pay 400"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("narrow", "an approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	a, _ := s.Action(aggregate.Status(s).Approvals[0])
	exp := time.Now().Add(time.Minute)
	edited := func(args string) func(*proof.Subject) {
		return func(x *proof.Subject) { x.Approved = json.RawMessage(args) }
	}
	approve := func(id, args string, p *events.ApprovalProof) error {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: id, Run: "narrow", Action: a.ID, Revision: a.Request.Revision, Approver: "keys", Proof: p, Arguments: json.RawMessage(args)})
		return err
	}
	version := s.Version()

	const schemaless = `{"amount":"less"}`
	wantCode(t, "an edit the input schema refuses", approve("schema", schemaless, signFor(t, alice, s, a, events.AnswerApprove, exp, edited(schemaless))), weft.CodeInvalidContent, "")
	const over = `{"amount":5000,"mode":"ok"}`
	wantCode(t, "an edit the policy denies", approve("deny", over, signFor(t, alice, s, a, events.AnswerApprove, exp, edited(over))), weft.CodeEditRefused, aggregate.EditDenied)
	const treasury = `{"amount":800,"mode":"ok"}`
	wantCode(t, "an edit that needs another approval", approve("treasury", treasury, signFor(t, alice, s, a, events.AnswerApprove, exp, edited(treasury))), weft.CodeEditRefused, aggregate.EditRequires)
	const lower = `{"amount":50,"mode":"ok"}`
	wantCode(t, "a proof of the model's arguments with an edit", approve("as-asked", lower, signFor(t, alice, s, a, events.AnswerApprove, exp, nil)), weft.CodeProofRefused, proof.ReasonOtherArguments)
	wantCode(t, "a proof of another edit", approve("other-edit", lower, signFor(t, alice, s, a, events.AnswerApprove, exp, edited(`{"amount":60,"mode":"ok"}`))), weft.CodeProofRefused, proof.ReasonOtherArguments)
	if got := h.state("narrow").Version(); got != version {
		t.Fatalf("refused edits changed the run: version %d, was %d", got, version)
	}

	good := signFor(t, alice, s, a, events.AnswerApprove, exp, edited(lower))
	if err := approve("good", lower, good); err != nil {
		t.Fatalf("a covered lower amount: %v", err)
	}
	s = h.waitStatus("narrow", aggregate.StatusFinished)
	if got := b.list(); !reflect.DeepEqual(got, []int64{50}) {
		t.Fatalf("bodies started with amounts %v, want exactly [50] (the edit, never the model's 400)", got)
	}
	got, _ := s.Action(a.ID)
	if string(got.Arguments) != string(a.Arguments) || len(got.Answers) != 1 || string(got.Answers[0].Arguments) != lower || string(got.Edited) != lower {
		t.Fatalf("recorded: arguments %s (model's %s), answers %+v, edited %s; want the model's kept and %s approved", got.Arguments, a.Arguments, got.Answers, got.Edited, lower)
	}

	// What the model read: the result wrapped with the note and the
	// edited arguments — exactly what the log folds to.
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	last := reqs[1].Transcript[len(reqs[1].Transcript)-1]
	if last.Role != model.RoleTool || len(last.Results) != 1 {
		t.Fatalf("the model's last message %+v, want one tool result", last)
	}
	var read struct {
		Note      string          `json:"note"`
		Arguments json.RawMessage `json:"arguments"`
		Result    payOut          `json:"result"`
	}
	if err := json.Unmarshal(last.Results[0].Content, &read); err != nil {
		t.Fatal(err)
	}
	if read.Note != aggregate.EditedNote || string(read.Arguments) != lower || read.Result.ID != "pay-"+a.ID {
		t.Fatalf("the model read %s, want the note, %s and the result", last.Results[0].Content, lower)
	}
	folded := runner.ModelMessages(aggregate.Transcript(h.state("narrow")))
	var fromLog model.Message
	for _, msg := range folded {
		if msg.Role == model.RoleTool {
			fromLog = msg
		}
	}
	if !reflect.DeepEqual(fromLog, last) {
		t.Fatalf("the log folds to %+v, the model read %+v", fromLog, last)
	}

	// The audit re-verifies the edited proof offline; the view shows both.
	envs, _, err := h.srv.Log.Load(c, "narrow")
	if err != nil {
		t.Fatal(err)
	}
	if rep := audit.Verify(envs); !rep.OK() || len(rep.Proofs) != 1 || !rep.Proofs[0].Verified {
		t.Fatalf("audit: %+v proofs %+v, want the edited proof verified", rep.Problem, rep.Proofs)
	}
	view := projections.Fold(recorded(t, envs))
	av, _ := view.Action(a.ID)
	if string(av.Arguments) != string(a.Arguments) || string(av.Approved) != lower || len(av.Approvals) != 1 || av.Approvals[0].Proof == nil || !av.Approvals[0].Proof.Verified {
		t.Fatalf("view: arguments %s approved %s approvals %+v", av.Arguments, av.Approved, av.Approvals)
	}
}

// payBoth starts run on a real server with the model paying 400 and 300
// under policy p (a credential approver, "desk") and returns the harness,
// the bodies' amounts, the test's context and the two pending requests.
func payBoth(t *testing.T, run string, p func(context.Context, policy.Action) (policy.Decision, error)) (*harness, *amounts, context.Context, []aggregate.Action) {
	h := newHarness(t)
	b := &amounts{}
	m := model.NewScripted("s", model.CallTools(payCall(400, "ok"), payCall(300, "ok")), model.Answer("paid"))
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{b.tool()}, policy.Func(p))})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "pay both"}); err != nil {
		t.Fatal(err)
	}
	return h, b, c, pendingOf(h, run, 2)
}

// TestSemantics4_ApproveNarrower_InABatch (docs/semantics.md §4,
// "Approving narrower arguments"): an approve item of a batch decision may
// narrow its call like a single approve. An edit the policy denies refuses
// its item edit_refused and, the run's items being all or nothing, records
// none; a reject item with edited arguments is refused before anything is
// looked up; the batch with the narrowed item and one as asked runs each
// body once, the narrowed one with the edit.
func TestSemantics4_ApproveNarrower_InABatch(t *testing.T) {
	h, b, c, p := payBoth(t, "nb", narrowPolicy)
	version := h.state("nb").Version()
	narrowed := approveItem("nb", p[0])
	narrowed.Arguments = json.RawMessage(`{"amount":5000,"mode":"ok"}`)
	rep, err := h.client.Decide(c, api.DecideRequest{BatchID: "nb-denied", Items: []api.DecideItem{narrowed, approveItem("nb", p[1])}})
	if err != nil || len(rep.Items) != 2 || rep.Items[0].Outcome != api.OutcomeRefused || rep.Items[0].Error == nil ||
		rep.Items[0].Error.Code != weft.CodeEditRefused || rep.Items[0].Error.Reason != aggregate.EditDenied || rep.Items[1].Outcome != api.OutcomeNotRecorded {
		t.Fatalf("a batch with a denied edit: %+v %v, want the item edit_refused(policy_denied), the other not_recorded", rep.Items, err)
	}
	rejectEdited := api.DecideItem{Run: "nb", Action: p[1].ID, Revision: p[1].Request.Revision, Answer: events.AnswerReject, Reason: "no", Approver: "desk", Credential: "alice", Arguments: json.RawMessage(`{"amount":1}`)}
	if _, err := h.client.Decide(c, api.DecideRequest{BatchID: "nb-reject", Items: []api.DecideItem{rejectEdited}}); weft.ErrorCode(err) != weft.CodeInvalidRequest {
		t.Fatalf("a reject item with edited arguments: %v, want invalid_request", err)
	}
	if got := h.state("nb").Version(); got != version {
		t.Fatalf("refused batches changed the run: version %d, was %d", got, version)
	}
	narrowed.Arguments = json.RawMessage(`{"amount":50,"mode":"ok"}`)
	rep, err = h.client.Decide(c, api.DecideRequest{BatchID: "nb-ok", Items: []api.DecideItem{narrowed, approveItem("nb", p[1])}})
	if err != nil || rep.Items[0].Outcome != api.OutcomeAnswered || rep.Items[1].Outcome != api.OutcomeAnswered {
		t.Fatalf("the batch: %+v %v", rep.Items, err)
	}
	h.waitStatus("nb", aggregate.StatusFinished)
	got := b.list()
	slices.Sort(got)
	if !reflect.DeepEqual(got, []int64{50, 300}) {
		t.Fatalf("bodies started with %v, want [50 300]: the narrowed call with its edit, the other as asked", got)
	}
}

// TestSemantics4_ApproveNarrower_NullArgumentsAreNoEdit (docs/semantics.md
// §4, "Approving narrower arguments"): "arguments": null on the wire is no
// edit, as an absent field is. An approve with it approves the call as the
// model asked it — the body gets the model's amount, the answer records no
// edit, the model reads its plain result — and a reject item of a batch
// with it is answered, not refused invalid_request.
func TestSemantics4_ApproveNarrower_NullArgumentsAreNoEdit(t *testing.T) {
	h, b, c, p := payBoth(t, "null", narrowPolicy)
	null := json.RawMessage("null")
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "null-approve", Run: "null", Action: p[0].ID, Revision: p[0].Request.Revision, Approver: "desk", Credential: "alice", Arguments: null}); err != nil {
		t.Fatalf("an approve with null arguments: %v, want the call approved as asked", err)
	}
	rejected := api.DecideItem{Run: "null", Action: p[1].ID, Revision: p[1].Request.Revision, Answer: events.AnswerReject, Reason: "no", Approver: "desk", Credential: "alice", Arguments: null}
	rep, err := h.client.Decide(c, api.DecideRequest{BatchID: "null-reject", Items: []api.DecideItem{rejected}})
	if err != nil || len(rep.Items) != 1 || rep.Items[0].Outcome != api.OutcomeAnswered {
		t.Fatalf("a reject item with null arguments: %+v %v, want it answered", rep.Items, err)
	}
	s := h.waitStatus("null", aggregate.StatusFinished)
	if got := b.list(); !reflect.DeepEqual(got, []int64{400}) {
		t.Fatalf("bodies started with amounts %v, want exactly [400]: the model's, null is no edit", got)
	}
	got, _ := s.Action(p[0].ID)
	if got.Edited != nil || len(got.Answers) != 1 || got.Answers[0].Arguments != nil {
		t.Fatalf("recorded edited %s, answers %+v; want no edit", got.Edited, got.Answers)
	}
	for _, msg := range aggregate.Transcript(s) {
		for _, r := range msg.Results {
			if r.CallID == p[0].CallID && string(r.Content) != `{"id":"pay-`+p[0].ID+`"}` {
				t.Fatalf("the model read %s for the call approved as asked, want its plain result", r.Content)
			}
		}
	}
}

// TestSemantics4_ApproveNarrower_PolicyHoldsTheEditNarrower
// (docs/semantics.md §4, "Approving narrower arguments"; docs/security.md):
// the policy re-run for an edited approve gets the model's arguments with
// the edit (policy.Action.Asked), so a policy can refuse an edit that is
// not narrower — here a higher amount the requirement answered would
// allow — and allow a lower one; it gets none for an approve as asked.
func TestSemantics4_ApproveNarrower_PolicyHoldsTheEditNarrower(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	narrower := func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		if _, ok := policy.Reviewer(ctx); ok {
			mu.Lock()
			asked = append(asked, string(a.Asked))
			mu.Unlock()
		}
		if a.Asked != nil {
			var was, is payIn
			if err := json.Unmarshal(a.Asked, &was); err != nil {
				return policy.Decision{}, err
			}
			if err := json.Unmarshal(a.Arguments, &is); err != nil {
				return policy.Decision{}, err
			}
			if is.Amount > was.Amount {
				return policy.Deny("an edit may only lower the amount"), nil
			}
		}
		return narrowPolicy(ctx, a)
	}
	h, b, c, p := payBoth(t, "hold", narrower)
	approve := func(id string, a aggregate.Action, args string) error {
		req := api.ApproveRequest{CommandID: id, Run: "hold", Action: a.ID, Revision: a.Request.Revision, Approver: "desk", Credential: "alice"}
		if args != "" {
			req.Arguments = json.RawMessage(args)
		}
		_, err := h.client.Approve(c, req)
		return err
	}
	wantCode(t, "a higher amount under the same requirement", approve("higher", p[0], `{"amount":450,"mode":"ok"}`), weft.CodeEditRefused, aggregate.EditDenied)
	if err := approve("lower", p[0], `{"amount":250,"mode":"ok"}`); err != nil {
		t.Fatalf("a lower amount: %v", err)
	}
	if err := approve("as-asked", p[1], ""); err != nil {
		t.Fatalf("the other call as asked: %v", err)
	}
	h.waitStatus("hold", aggregate.StatusFinished)
	got := b.list()
	slices.Sort(got)
	if !reflect.DeepEqual(got, []int64{250, 300}) {
		t.Fatalf("bodies started with %v, want [250 300]", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{string(p[0].Arguments), string(p[0].Arguments), ""}
	if !reflect.DeepEqual(asked, want) {
		t.Fatalf("the policy's re-runs got asked %q, want %q: the model's arguments with each edit, none as asked", asked, want)
	}
}
