package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// signCommand signs a command proof of s with kp, expiring at expires.
func signCommand(t *testing.T, kp nkeys.KeyPair, s proof.CommandSubject, expires time.Time) *events.CommandProof {
	t.Helper()
	pub, _ := kp.PublicKey()
	p, err := proof.NewCommand(s, pub, expires)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	return &p
}

// identityHarness runs an agent whose first turn pays 500 (approval
// finance, signed approver "keys" trusting alice) and 1 (uncertain), on a
// runner with people.
func identityHarness(t *testing.T, people approvers.People, alicePub string, runs ...string) *harness {
	t.Helper()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(1, "uncertain")), model.Answer("done"))
	ag, err := agent.New("desk", m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithApprovers(
		approvers.Trusting("desk"),
		approvers.Signed("keys", []approvers.Key{{Public: alicePub, Reviewer: "alice@bank"}}),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.startRunner([]*agent.Agent{ag}, runner.WithPeople(people))
	for _, r := range runs {
		if _, err := h.client.Start(ctx(t), api.StartRequest{Run: r, Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func refusedCode(t *testing.T, what string, err error, code weft.Code, reason string) {
	t.Helper()
	we, ok := err.(*weft.Error)
	if !ok || we.Code != code || we.Reason != reason {
		t.Fatalf("%s: %v, want %s(%s)", what, err, code, reason)
	}
}

// TestSecurityWhoDidIt_SecureVerified (docs/security.md "Who did it";
// docs/semantics.md §4 approvals, §7 cancellation, §10 reconciliation): on
// a deployment with person keys and a required identity, every command a
// person makes — approve, reconcile, resolve, cancel — is recorded under
// the name of the key that signed it, verified, with the key; a command
// signed by a key not in the deployment's list is refused
// proof_refused(not_authenticated), one without a proof or without a
// reason identity_required, and a proof for other content or another
// reason proof_refused; a typed --by is not what is recorded.
func TestSecurityWhoDidIt_SecureVerified(t *testing.T) {
	t.Parallel()
	alice, alicePub := userKey(t, 1)
	carol, carolPub := userKey(t, 4)
	mallory, _ := userKey(t, 3)
	people := approvers.People{Keys: []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}, Require: true}
	h := identityHarness(t, people, alicePub, "who", "who-c")
	c := ctx(t)
	s := h.waitFor("who", "the approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	a, _ := s.Action(aggregate.Status(s).Approvals[0])
	exp := time.Now().Add(30 * time.Second)

	// Approve: the approver's key; a Trusting credential is refused under
	// the requirement (the deployment has keys: a name typed is not
	// enough).
	_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "typed", Run: "who", Action: a.ID, Revision: a.Request.Revision, Approver: "desk", Credential: "mallory"})
	refusedCode(t, "a typed approval", err, weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "signed", Run: "who", Action: a.ID, Revision: a.Request.Revision, Approver: "keys",
		Proof: signFor(t, alice, s, a, events.AnswerApprove, exp, nil)}); err != nil {
		t.Fatal(err)
	}

	// Reconcile the uncertain call.
	h.waitStatus("who", aggregate.StatusSuspended)
	unc := "1/call_1_2"
	content := tools.Unconfirmed("asking the bank")
	sub := proof.CommandSubject{Command: proof.CommandReconcile, Run: "who", Action: unc, Content: content, Reason: "bank ticket 7"}
	reconcile := func(id, by, reason string, p *events.CommandProof) error {
		_, err := h.client.Reconcile(c, api.ReconcileRequest{CommandID: id, Run: "who", Action: unc, Content: content, By: by, Reason: reason, Proof: p})
		return err
	}
	refusedCode(t, "reconcile signed by a stranger", reconcile("mallory", "carol@ops", sub.Reason, signCommand(t, mallory, sub, exp)), weft.CodeProofRefused, approvers.ReasonNotAuthenticated)
	refusedCode(t, "reconcile with a typed name only", reconcile("typed", "carol@ops", sub.Reason, nil), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	noReason := sub
	noReason.Reason = ""
	refusedCode(t, "reconcile without a reason", reconcile("noreason", "", "", signCommand(t, carol, noReason, exp)), weft.CodeIdentityRequired, approvers.ReasonNoReason)
	other := sub
	other.Content = tools.Unconfirmed("something else")
	refusedCode(t, "reconcile with a proof for other content", reconcile("other", "", sub.Reason, signCommand(t, carol, other, exp)), weft.CodeProofRefused, proof.ReasonOtherContent)
	if err := reconcile("good", "mallory", sub.Reason, signCommand(t, carol, sub, exp)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("who", aggregate.StatusFinished)

	// Resolve the open question.
	truth := json.RawMessage(`{"id":"pay-1"}`)
	rsub := proof.CommandSubject{Command: proof.CommandResolve, Run: "who", Action: unc, Content: truth, Reason: "statement"}
	if _, err := h.client.Resolve(c, api.ResolveRequest{CommandID: "resolve", Run: "who", Action: unc, Content: truth, Reason: rsub.Reason, Proof: signCommand(t, carol, rsub, exp)}); err != nil {
		t.Fatal(err)
	}

	// Cancel the second run.
	h.waitFor("who-c", "its approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	csub := proof.CommandSubject{Command: proof.CommandCancel, Run: "who-c", Reason: "customer left"}
	_, err = h.client.Cancel(c, api.CancelRequest{CommandID: "cancel-typed", Run: "who-c", Reason: csub.Reason, By: "carol@ops"})
	refusedCode(t, "cancel with a typed name only", err, weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "cancel", Run: "who-c", Reason: csub.Reason, Proof: signCommand(t, carol, csub, exp)}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("who-c", aggregate.StatusFinished)

	// The log records each command verified, under the key's name.
	want := map[events.Name]struct{ by, key string }{
		events.NameApprovalAnswered: {"alice@bank", alicePub},
		events.NameReconciled:       {"carol@ops", carolPub},
		events.NameResolved:         {"carol@ops", carolPub},
		events.NameCancelRequested:  {"carol@ops", carolPub},
	}
	var views []projections.RunView
	for _, run := range []string{"who", "who-c"} {
		envs, _, err := h.srv.Log.Load(c, run)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, projections.Fold(recorded(t, envs)))
		for _, rec := range recorded(t, envs) {
			var by string
			var id events.Identity
			switch e := rec.Event.(type) {
			case events.ApprovalAnswered:
				by, id = e.Reviewer, e.Identity
			case events.Reconciled:
				by, id = e.By, e.Identity
			case events.Resolved:
				by, id = e.By, e.Identity
			case events.CancelRequested:
				by, id = e.By, e.Identity
			default:
				continue
			}
			w := want[rec.Event.EventName()]
			if by != w.by || !id.Verified || id.Key != w.key {
				t.Fatalf("%s recorded by %q %+v, want %q verified by %s", rec.Event.EventName(), by, id, w.by, w.key)
			}
			delete(want, rec.Event.EventName())
		}
	}
	if len(want) != 0 {
		t.Fatalf("not recorded: %v", want)
	}
	// The run views say so too.
	av, _ := views[0].Action(a.ID)
	uv, _ := views[0].Action(unc)
	if len(av.Approvals) != 1 || !av.Approvals[0].Verified || av.Approvals[0].Reviewer != "alice@bank" {
		t.Fatalf("approval view %+v", av.Approvals)
	}
	if r := uv.Reconciled; r == nil || !r.Verified || r.By != "carol@ops" || r.Key != carolPub || r.Reason != "bank ticket 7" {
		t.Fatalf("reconciled view %+v", uv.Reconciled)
	}
	if q := uv.Question; q == nil || q.Resolution == nil || !q.Resolution.Verified || q.Resolution.By != "carol@ops" {
		t.Fatalf("question view %+v", uv.Question)
	}
	if cv := views[1].Cancelled; cv == nil || !cv.Verified || cv.By != "carol@ops" || cv.Reason != "customer left" {
		t.Fatalf("cancelled view %+v", views[1].Cancelled)
	}
}

// TestSecurityWhoDidIt_DemoUnverified (docs/security.md "Who did it"): on
// a deployment without person keys the typed name is recorded, unverified,
// and the run view says so; with a required identity a command without a
// name, or without a reason, is refused identity_required.
func TestSecurityWhoDidIt_DemoUnverified(t *testing.T) {
	t.Parallel()
	_, alicePub := userKey(t, 1)
	for _, require := range []bool{false, true} {
		h := identityHarness(t, approvers.People{Require: require}, alicePub, "demo")
		c := ctx(t)
		s := h.waitFor("demo", "the approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
		a, _ := s.Action(aggregate.Status(s).Approvals[0])
		if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "typed", Run: "demo", Action: a.ID, Revision: a.Request.Revision, Approver: "desk", Credential: "dana"}); err != nil {
			t.Fatal(err)
		}
		h.waitStatus("demo", aggregate.StatusSuspended)
		unc := "1/call_1_2"
		reconcile := func(id, by, reason string) error {
			_, err := h.client.Reconcile(c, api.ReconcileRequest{CommandID: id, Run: "demo", Action: unc, Content: tools.Unconfirmed("asking"), By: by, Reason: reason})
			return err
		}
		if require {
			refusedCode(t, "reconcile without a name", reconcile("anon", "", "why"), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
			refusedCode(t, "reconcile without a reason", reconcile("noreason", "erin", ""), weft.CodeIdentityRequired, approvers.ReasonNoReason)
		}
		if err := reconcile("named", "erin", "why"); err != nil {
			t.Fatal(err)
		}
		h.waitStatus("demo", aggregate.StatusFinished)
		envs, _, err := h.srv.Log.Load(c, "demo")
		if err != nil {
			t.Fatal(err)
		}
		v := projections.Fold(recorded(t, envs))
		av, _ := v.Action(a.ID)
		uv, _ := v.Action(unc)
		if len(av.Approvals) != 1 || av.Approvals[0].Verified || av.Approvals[0].Reviewer != "dana" {
			t.Fatalf("require %v: approval view %+v, want dana unverified", require, av.Approvals)
		}
		if r := uv.Reconciled; r == nil || r.Verified || r.By != "erin" || r.Key != "" {
			t.Fatalf("require %v: reconciled view %+v, want erin unverified", require, uv.Reconciled)
		}
	}
}

// TestSecurityWhoDidIt_SecurePauseAndResume (docs/security.md "Who did
// it"; docs/semantics.md §13): pause and resume are person's commands like
// cancel — on a deployment with person keys and a required identity, a
// pause or resume signed by a person key is recorded under the key's name,
// verified, with the key and the proof, and the run view says so; one
// signed by a key not in the deployment's list is refused
// proof_refused(not_authenticated), one without a proof identity_required
// (no_identity), without a reason identity_required (no_reason), and a
// pause's proof sent with a resume proof_refused(other_command); nothing
// is recorded for a refusal.
func TestSecurityWhoDidIt_SecurePauseAndResume(t *testing.T) {
	t.Parallel()
	_, alicePub := userKey(t, 1)
	carol, carolPub := userKey(t, 4)
	mallory, _ := userKey(t, 3)
	people := approvers.People{Keys: []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}, Require: true}
	h := identityHarness(t, people, alicePub, "who-p")
	c := ctx(t)
	h.waitFor("who-p", "the approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	exp := time.Now().Add(30 * time.Second)
	psub := proof.CommandSubject{Command: proof.CommandPause, Run: "who-p", Reason: "checking the vendor"}
	rsub := proof.CommandSubject{Command: proof.CommandResume, Run: "who-p", Reason: "vendor confirmed"}
	pause := func(id, by, reason string, p *events.CommandProof) error {
		_, err := h.client.Pause(c, api.PauseRequest{CommandID: id, Run: "who-p", By: by, Reason: reason, Proof: p})
		return err
	}
	resume := func(id, by, reason string, p *events.CommandProof) error {
		_, err := h.client.Resume(c, api.ResumeRequest{CommandID: id, Run: "who-p", By: by, Reason: reason, Proof: p})
		return err
	}

	refusedCode(t, "pause with a typed name only", pause("p-typed", "carol@ops", psub.Reason, nil), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	refusedCode(t, "pause signed by a stranger", pause("p-mallory", "carol@ops", psub.Reason, signCommand(t, mallory, psub, exp)), weft.CodeProofRefused, approvers.ReasonNotAuthenticated)
	noReason := psub
	noReason.Reason = ""
	refusedCode(t, "pause without a reason", pause("p-noreason", "", "", signCommand(t, carol, noReason, exp)), weft.CodeIdentityRequired, approvers.ReasonNoReason)
	if s := h.state("who-p"); s.Paused() {
		t.Fatal("a refused pause paused the run")
	}
	rep, err := h.client.Pause(c, api.PauseRequest{CommandID: "p-good", Run: "who-p", By: "mallory", Reason: psub.Reason, Proof: signCommand(t, carol, psub, exp)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != string(aggregate.StatusPaused) {
		t.Fatalf("pause answered %q, want paused", rep.Status)
	}

	refusedCode(t, "resume with a typed name only", resume("r-typed", "carol@ops", rsub.Reason, nil), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	refusedCode(t, "resume signed by a stranger", resume("r-mallory", "", rsub.Reason, signCommand(t, mallory, rsub, exp)), weft.CodeProofRefused, approvers.ReasonNotAuthenticated)
	refusedCode(t, "resume with the pause's proof", resume("r-other", "", psub.Reason, signCommand(t, carol, psub, exp)), weft.CodeProofRefused, proof.ReasonOtherCommand)

	// The view names who paused it while it is paused.
	envs, _, err := h.srv.Log.Load(c, "who-p")
	if err != nil {
		t.Fatal(err)
	}
	v := projections.Fold(recorded(t, envs))
	if p := v.Pause; p == nil || !p.Verified || p.By != "carol@ops" || p.Key != carolPub || p.Reason != psub.Reason {
		t.Fatalf("pause view %+v, want carol@ops verified by %s", v.Pause, carolPub)
	}
	if err := resume("r-good", "mallory", rsub.Reason, signCommand(t, carol, rsub, exp)); err != nil {
		t.Fatal(err)
	}
	if s := h.state("who-p"); s.Paused() {
		t.Fatal("the signed resume left the run paused")
	}

	// The log records the pause and the resume verified, under the key's
	// name, each once, with its proof.
	if envs, _, err = h.srv.Log.Load(c, "who-p"); err != nil {
		t.Fatal(err)
	}
	seen := map[events.Name]int{}
	for _, rec := range recorded(t, envs) {
		var by string
		var id events.Identity
		var p *events.CommandProof
		switch e := rec.Event.(type) {
		case events.RunPaused:
			by, id, p = e.By, e.Identity, e.Proof
		case events.RunResumed:
			by, id, p = e.By, e.Identity, e.Proof
		default:
			continue
		}
		seen[rec.Event.EventName()]++
		if by != "carol@ops" || !id.Verified || id.Key != carolPub || p == nil || p.Key != carolPub {
			t.Fatalf("%s recorded by %q %+v proof %+v, want carol@ops verified by %s with the proof", rec.Event.EventName(), by, id, p, carolPub)
		}
	}
	if seen[events.NameRunPaused] != 1 || seen[events.NameRunResumed] != 1 {
		t.Fatalf("recorded %v, want one run_paused and one run_resumed", seen)
	}
}
