package runner_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// The ways a person's command says who made it, in
// TestSecurityWhoDidIt_RequiredForEveryCommand.
const (
	whoNobody = "nobody" // no name, no credential, no proof
	whoTyped  = "typed"  // a name typed (a credential for an answer), no proof
	whoSigned = "signed" // a signed proof by a key the deployment trusts
)

// TestSecurityWhoDidIt_RequiredForEveryCommand (docs/security.md "Who did
// it"; docs/protocol.md identity_required; docs/semantics.md §4
// approvals, §7 cancellation, §10 reconciliation, §13 pause and resume,
// §14 restart; docs/adr/0030 legal holds): on a deployment that requires
// an identity and a reason (approvers.People{Require: true}, runner
// --require-identity), every person's command — approve, reject,
// reconcile, resolve, cancel, pause, resume, restart, hold and
// release_hold — sent without saying who made it is refused
// identity_required(no_identity), and (but approve, which takes no
// reason) sent without a reason identity_required(no_reason); a hold and
// its release, which always need a reason and a name or a proof, are
// refused invalid_request without; a refusal records nothing (the run's
// log head is unchanged, a restart makes no new run, weft_holds is
// unchanged); with both the command is accepted. Without person keys a
// name typed says who (an answer's credential: one without is refused by
// its approver, proof_refused, so no answer reaches no_identity there);
// with person keys only a signed proof does, and a name typed is "no
// identity".
func TestSecurityWhoDidIt_RequiredForEveryCommand(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "demo", true: "secure"}[secure], func(t *testing.T) {
			t.Parallel()
			requiredForEveryCommand(t, secure)
		})
	}
}

func requiredForEveryCommand(t *testing.T, secure bool) {
	alice, alicePub := userKey(t, 1)
	carol, carolPub := userKey(t, 4)
	people := approvers.People{Require: true}
	noIdentity, identified := whoNobody, whoTyped
	if secure {
		people.Keys = []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}
		noIdentity, identified = whoTyped, whoSigned
	}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(1, "uncertain")), model.Answer("done"))
	desk, err := agent.New("desk", m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithApprovers(
		approvers.Trusting("desk"),
		approvers.Signed("keys", []approvers.Key{{Public: alicePub, Reviewer: "alice@bank"}}),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := agent.New("plain", model.NewRules("s"), nil, policy.Func(approvalAbove)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.startRunner([]*agent.Agent{desk, plain}, runner.WithPeople(people))
	c := ctx(t)
	for _, r := range []api.StartRequest{{Run: "a", Agent: "desk", Input: "pay"}, {Run: "b", Agent: "desk", Input: "pay"}, {Run: "done", Agent: "plain", Input: "hello"}} {
		if _, err := h.client.Start(c, r); err != nil {
			t.Fatal(err)
		}
	}
	h.waitStatus("done", aggregate.StatusFinished)
	exp := time.Now().Add(30 * time.Second)
	unc := "1/call_1_2"
	asked := tools.Unconfirmed("asking the bank")
	truth := json.RawMessage(`{"id":"pay-1"}`)

	// by is the name typed, and p the command proof of sub, as who says.
	person := func(who string, sub proof.CommandSubject) (by string, p *events.CommandProof) {
		switch who {
		case whoTyped:
			return "carol@ops", nil
		case whoSigned:
			return "", signCommand(t, carol, sub, exp)
		}
		return "", nil
	}
	// pending is run's pending approval request.
	pending := func(run string) (aggregate.State, aggregate.Action) {
		s := h.waitFor(run, "the approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
		a, _ := s.Action(aggregate.Status(s).Approvals[0])
		return s, a
	}
	// answer is who answers run's pending request (approver, credential
	// and proof), with reason for a reject.
	answer := func(run, who, kind, reason string) (string, string, *events.ApprovalProof) {
		switch who {
		case whoTyped:
			return "desk", "dana", nil
		case whoSigned:
			s, a := pending(run)
			return "keys", "", signFor(t, alice, s, a, kind, exp, func(sub *proof.Subject) { sub.Reason = reason })
		}
		return "desk", "", nil
	}

	cases := []struct {
		name string
		// run is the run whose log a refusal must leave as it is.
		run string
		// ready waits until the command can be accepted.
		ready func()
		// send sends the command with command id id, said to be made as
		// who, with reason.
		send func(id, who, reason string) error
		// approve takes no reason.
		noReason bool
		// answer: the approver names who answers; without person keys
		// an answer without a credential is refused by the approver
		// (proof_refused), before the requirement is checked.
		answer bool
		// holds: a refusal must leave weft_holds as it is too; and a hold
		// or its release always needs a reason and a name or a proof,
		// required or not (docs/protocol.md, identity_required:
		// invalid_request without).
		holds bool
		// newRun: a refused restart must not make this run.
		newRun string
	}{
		{name: "approve", run: "a", noReason: true, answer: true, ready: func() { pending("a") }, send: func(id, who, _ string) error {
			_, a := pending("a")
			appr, cred, p := answer("a", who, events.AnswerApprove, "")
			_, err := h.client.Approve(c, api.ApproveRequest{CommandID: id, Run: "a", Action: a.ID, Revision: a.Request.Revision, Approver: appr, Credential: cred, Proof: p})
			return err
		}},
		{name: "reconcile", run: "a", ready: func() { h.waitStatus("a", aggregate.StatusSuspended) }, send: func(id, who, reason string) error {
			by, p := person(who, proof.CommandSubject{Command: proof.CommandReconcile, Run: "a", Action: unc, Content: asked, Reason: reason})
			_, err := h.client.Reconcile(c, api.ReconcileRequest{CommandID: id, Run: "a", Action: unc, Content: asked, By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "resolve", run: "a", ready: func() { h.waitStatus("a", aggregate.StatusFinished) }, send: func(id, who, reason string) error {
			by, p := person(who, proof.CommandSubject{Command: proof.CommandResolve, Run: "a", Action: unc, Content: truth, Reason: reason})
			_, err := h.client.Resolve(c, api.ResolveRequest{CommandID: id, Run: "a", Action: unc, Content: truth, By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "pause", run: "b", ready: func() { pending("b") }, send: func(id, who, reason string) error {
			by, p := person(who, proof.CommandSubject{Command: proof.CommandPause, Run: "b", Reason: reason})
			_, err := h.client.Pause(c, api.PauseRequest{CommandID: id, Run: "b", By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "resume", run: "b", ready: func() {}, send: func(id, who, reason string) error {
			by, p := person(who, proof.CommandSubject{Command: proof.CommandResume, Run: "b", Reason: reason})
			_, err := h.client.Resume(c, api.ResumeRequest{CommandID: id, Run: "b", By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "reject", run: "b", answer: true, ready: func() { pending("b") }, send: func(id, who, reason string) error {
			_, a := pending("b")
			appr, cred, p := answer("b", who, events.AnswerReject, reason)
			_, err := h.client.Reject(c, api.RejectRequest{CommandID: id, Run: "b", Action: a.ID, Revision: a.Request.Revision, Approver: appr, Credential: cred, Reason: reason, Proof: p})
			return err
		}},
		{name: "cancel", run: "b", ready: func() { h.waitStatus("b", aggregate.StatusSuspended) }, send: func(id, who, reason string) error {
			by, p := person(who, proof.CommandSubject{Command: proof.CommandCancel, Run: "b", Reason: reason})
			_, err := h.client.Cancel(c, api.CancelRequest{CommandID: id, Run: "b", By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "restart", run: "done", newRun: "re", ready: func() {}, send: func(id, who, reason string) error {
			by, p := person(who, proof.RestartSubject("done", 1, "re", reason))
			_, err := h.client.Restart(c, api.RestartRequest{CommandID: id, Run: "re", From: api.RestartFrom{Run: "done", Turn: 1}, By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "hold", run: "done", holds: true, ready: func() {}, send: func(id, who, reason string) error {
			by, p := person(who, proof.HoldSubject("done", reason))
			_, err := h.client.Hold(c, api.HoldRequest{CommandID: id, Run: "done", By: by, Reason: reason, Proof: p})
			return err
		}},
		{name: "release_hold", run: "done", holds: true, ready: func() {}, send: func(id, who, reason string) error {
			by, p := person(who, proof.ReleaseHoldSubject("done", "h1", reason))
			_, err := h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: id, Run: "done", Hold: "h1", By: by, Reason: reason, Proof: p})
			return err
		}},
	}
	head := func(run string) eventlog.Head {
		_, hd, err := h.srv.Log.Load(c, run)
		if err != nil {
			t.Fatal(err)
		}
		return hd
	}
	holds := func() []retention.Hold {
		hs, err := retention.HoldsOf(c, h.srv.JS, "done")
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	// The cases run in order: each leaves the run where the next one can
	// be accepted (approve then reconcile then resolve on a; pause, resume,
	// reject, cancel on b; restart, hold, release on done).
	for _, tc := range cases {
		tc.ready()
		type refusal struct {
			id, who, reason string
			code            weft.Code
			want            string
		}
		var refusals []refusal
		switch {
		case tc.holds && noIdentity == whoNobody:
			refusals = append(refusals, refusal{tc.name + "-who", noIdentity, "why", weft.CodeInvalidRequest, ""})
		case secure || !tc.answer:
			refusals = append(refusals, refusal{tc.name + "-who", noIdentity, "why", weft.CodeIdentityRequired, approvers.ReasonNoIdentity})
		}
		switch {
		case tc.holds:
			refusals = append(refusals, refusal{tc.name + "-why", identified, "", weft.CodeInvalidRequest, ""})
		case !tc.noReason:
			refusals = append(refusals, refusal{tc.name + "-why", identified, "", weft.CodeIdentityRequired, approvers.ReasonNoReason})
		}
		for _, r := range refusals {
			before, beforeHolds := head(tc.run), holds()
			refusedCode(t, tc.name+" as "+r.who+" with reason "+r.reason, tc.send(r.id, r.who, r.reason), r.code, r.want)
			if after := head(tc.run); after != before {
				t.Fatalf("a refused %s moved %s's head from %+v to %+v", tc.name, tc.run, before, after)
			}
			if tc.holds {
				if after := holds(); !reflect.DeepEqual(after, beforeHolds) {
					t.Fatalf("a refused %s changed weft_holds from %+v to %+v", tc.name, beforeHolds, after)
				}
			}
			if tc.newRun != "" {
				if hd := head(tc.newRun); hd.Version != 0 {
					t.Fatalf("a refused %s made run %s (head %+v)", tc.name, tc.newRun, hd)
				}
			}
		}
		if err := tc.send(tc.name, identified, "why"); err != nil {
			t.Fatalf("%s as %s with a reason: %v", tc.name, identified, err)
		}
	}
	if o, _ := h.waitStatus("b", aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCancelled {
		t.Fatalf("run b finished %+v, want cancelled", o)
	}
	if hs := holds(); len(hs) != 1 || hs[0].Active() {
		t.Fatalf("weft_holds keeps %+v, want h1 released", hs)
	}
	if hd := head("re"); hd.Version == 0 {
		t.Fatal("the accepted restart made no run re")
	}
}
