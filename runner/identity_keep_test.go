package runner_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

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
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/runner"
)

// keepHarness runs an agent whose model answers every turn, on a runner
// with people, and finishes the runs runs (one turn each).
func keepHarness(t *testing.T, people approvers.People, runs ...string) *harness {
	t.Helper()
	h, _ := keepHarnessOn(t, people, nil, runs...)
	return h
}

// keepHarnessOn is keepHarness with the runner's options opts too; it
// returns the runner.
func keepHarnessOn(t *testing.T, people approvers.People, opts []runner.Option, runs ...string) (*harness, *runner.Runner) {
	t.Helper()
	ag, err := agent.New("plain", model.NewRules("s"), nil, policy.Func(approvalAbove)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{ag}, append([]runner.Option{runner.WithPeople(people)}, opts...)...)
	for _, r := range runs {
		if _, err := h.client.Start(ctx(t), api.StartRequest{Run: r, Agent: "plain", Input: "hello"}); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(r, aggregate.StatusFinished)
	}
	return h, r
}

// forkOf returns the RunForked of run's log and the run's view.
func forkOf(t *testing.T, h *harness, run string) (events.RunForked, projections.RunView, []projections.Deed) {
	t.Helper()
	envs, _, err := h.srv.Log.Load(ctx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	recs := recorded(t, envs)
	for _, r := range recs {
		if f, ok := r.Event.(events.RunForked); ok {
			return f, projections.Fold(recs), projections.Deeds(recs)
		}
	}
	t.Fatalf("run %s records no fork", run)
	return events.RunForked{}, projections.RunView{}, nil
}

// TestSecurityWhoDidIt_RestartAndHoldVerified (docs/security.md "Who did
// it"; docs/semantics.md §14 restart; docs/adr/0030 legal holds): on a
// deployment with person keys and a required identity, a restart, a legal
// hold and its release without a signed proof are refused
// identity_required (no_identity), a signed one without a reason
// identity_required (no_reason), a proof by a stranger's key, or for
// another run, command or new run, proof_refused, and a signed restart
// that names no new run invalid_request; a signed one records the
// key's person, verified, with the key: the restart in the new run's
// RunForked (and its view and deeds), the hold and its release in
// weft_holds and the replies. A typed --by is not what is recorded.
func TestSecurityWhoDidIt_RestartAndHoldVerified(t *testing.T) {
	t.Parallel()
	carol, carolPub := userKey(t, 4)
	mallory, _ := userKey(t, 3)
	people := approvers.People{Keys: []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}, Require: true}
	h := keepHarness(t, people, "done-1", "done-2")
	c := ctx(t)
	exp := time.Now().Add(30 * time.Second)

	// Restart.
	sub := proof.RestartSubject("done-1", 1, "re-1", "tool fixed")
	restart := func(id, run, by, reason string, p *events.CommandProof) error {
		_, err := h.client.Restart(c, api.RestartRequest{CommandID: id, Run: run, From: api.RestartFrom{Run: "done-1", Turn: 1}, By: by, Reason: reason, Proof: p})
		return err
	}
	refusedCode(t, "restart with a typed name only", restart("typed", "re-1", "carol@ops", sub.Reason, nil), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	refusedCode(t, "restart signed by a stranger", restart("mallory", "re-1", "carol@ops", sub.Reason, signCommand(t, mallory, sub, exp)), weft.CodeProofRefused, approvers.ReasonNotAuthenticated)
	noReason := proof.RestartSubject("done-1", 1, "re-1", "")
	refusedCode(t, "restart without a reason", restart("noreason", "re-1", "", "", signCommand(t, carol, noReason, exp)), weft.CodeIdentityRequired, approvers.ReasonNoReason)
	refusedCode(t, "restart with a proof for another run", restart("other-run", "re-1", "", sub.Reason, signCommand(t, carol, proof.RestartSubject("done-2", 1, "re-1", "tool fixed"), exp)), weft.CodeProofRefused, proof.ReasonOtherRun)
	refusedCode(t, "restart with a proof for another new run", restart("other-new", "re-2", "", sub.Reason, signCommand(t, carol, sub, exp)), weft.CodeProofRefused, proof.ReasonOtherContent)
	refusedCode(t, "restart with a hold's proof", restart("other-cmd", "re-1", "", sub.Reason, signCommand(t, carol, proof.HoldSubject("done-1", "tool fixed"), exp)), weft.CodeProofRefused, proof.ReasonOtherCommand)
	// A signed restart names its new run: the proof states it.
	refusedCode(t, "a signed restart naming no new run", restart("no-run", "", "", sub.Reason, signCommand(t, carol, sub, exp)), weft.CodeInvalidRequest, "")
	if err := restart("good", "re-1", "mallory", sub.Reason, signCommand(t, carol, sub, exp)); err != nil {
		t.Fatal(err)
	}
	f, v, deeds := forkOf(t, h, "re-1")
	if f.By != "carol@ops" || !f.Verified || f.Key != carolPub || f.Reason != "tool fixed" || f.Proof == nil || f.Proof.Key != carolPub {
		t.Fatalf("the fork records %q %+v reason %q proof %+v, want carol@ops verified by %s", f.By, f.Identity, f.Reason, f.Proof, carolPub)
	}
	if r := v.Restarted; r == nil || !r.Verified || r.By != "carol@ops" || r.Key != carolPub || r.Reason != "tool fixed" {
		t.Fatalf("the view's restarted %+v", v.Restarted)
	}
	if len(deeds) != 1 || deeds[0].What != "restart from done-1 turn 1" || !deeds[0].Who.Verified || deeds[0].Problem != "" {
		t.Fatalf("deeds %+v", deeds)
	}

	// Hold and release.
	hsub := proof.HoldSubject("done-1", "dispute D-17")
	_, err := h.client.Hold(c, api.HoldRequest{CommandID: "h-typed", Run: "done-1", Reason: hsub.Reason, By: "carol@ops"})
	refusedCode(t, "hold with a typed name only", err, weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	_, err = h.client.Hold(c, api.HoldRequest{CommandID: "h-other", Run: "done-1", Reason: hsub.Reason, Proof: signCommand(t, carol, proof.HoldSubject("done-2", "dispute D-17"), exp)})
	refusedCode(t, "hold with a proof for another run", err, weft.CodeProofRefused, proof.ReasonOtherRun)
	_, err = h.client.Hold(c, api.HoldRequest{CommandID: "h-stranger", Run: "done-1", Reason: hsub.Reason, Proof: signCommand(t, mallory, hsub, exp)})
	refusedCode(t, "hold signed by a stranger", err, weft.CodeProofRefused, approvers.ReasonNotAuthenticated)
	rep, err := h.client.Hold(c, api.HoldRequest{CommandID: "h-good", Run: "done-1", Reason: hsub.Reason, By: "mallory", Proof: signCommand(t, carol, hsub, exp)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.By != "carol@ops" || !rep.Verified || rep.Key != carolPub {
		t.Fatalf("hold reply %+v", rep)
	}
	rsub := proof.ReleaseHoldSubject("done-1", rep.Hold, "D-17 settled")
	_, err = h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-cmd", Run: "done-1", Hold: rep.Hold, Reason: rsub.Reason, Proof: signCommand(t, carol, proof.HoldSubject("done-1", "D-17 settled"), exp)})
	refusedCode(t, "release with a hold's proof", err, weft.CodeProofRefused, proof.ReasonOtherCommand)
	_, err = h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-typed", Run: "done-1", Hold: rep.Hold, Reason: rsub.Reason, By: "carol@ops"})
	refusedCode(t, "release with a typed name only", err, weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	rel, err := h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-good", Run: "done-1", Hold: rep.Hold, Reason: rsub.Reason, Proof: signCommand(t, carol, rsub, exp)})
	if err != nil {
		t.Fatal(err)
	}
	if r := rel.Released; r == nil || r.By != "carol@ops" || !r.Verified || r.Key != carolPub {
		t.Fatalf("release reply %+v", rel.Released)
	}
	hs, err := retention.HoldsOf(c, h.srv.JS, "done-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].By != "carol@ops" || !hs[0].Verified || hs[0].Key != carolPub || hs[0].Proof == nil ||
		hs[0].Released == nil || !hs[0].Released.Verified || hs[0].Released.Key != carolPub || hs[0].Released.Proof == nil {
		t.Fatalf("weft_holds keeps %+v", hs)
	}
}

// TestSecurityWhoDidIt_RestartAndHoldDemo (docs/security.md "Who did
// it"): on a deployment without person keys that requires an identity, a
// restart or hold that names nobody, or gives no reason, is refused
// identity_required; the typed name is recorded, unverified.
func TestSecurityWhoDidIt_RestartAndHoldDemo(t *testing.T) {
	t.Parallel()
	h := keepHarness(t, approvers.People{Require: true}, "done-1")
	c := ctx(t)
	restart := func(id, run, by, reason string) error {
		_, err := h.client.Restart(c, api.RestartRequest{CommandID: id, Run: run, From: api.RestartFrom{Run: "done-1", Turn: 1}, By: by, Reason: reason})
		return err
	}
	refusedCode(t, "restart naming nobody", restart("nobody", "re-1", "", "tool fixed"), weft.CodeIdentityRequired, approvers.ReasonNoIdentity)
	refusedCode(t, "restart without a reason", restart("noreason", "re-1", "dave", ""), weft.CodeIdentityRequired, approvers.ReasonNoReason)
	if err := restart("good", "re-1", "dave", "tool fixed"); err != nil {
		t.Fatal(err)
	}
	f, v, deeds := forkOf(t, h, "re-1")
	if f.By != "dave" || f.Verified || f.Key != "" || f.Proof != nil || f.Reason != "tool fixed" {
		t.Fatalf("the fork records %q %+v reason %q, want dave unverified", f.By, f.Identity, f.Reason)
	}
	if r := v.Restarted; r == nil || r.Verified || r.By != "dave" {
		t.Fatalf("the view's restarted %+v", v.Restarted)
	}
	if len(deeds) != 1 || deeds[0].Who.Verified || deeds[0].Who.By != "dave" || deeds[0].Problem != "" {
		t.Fatalf("deeds %+v", deeds)
	}
	rep, err := h.client.Hold(c, api.HoldRequest{CommandID: "h", Run: "done-1", Reason: "dispute D-17", By: "erin"})
	if err != nil || rep.By != "erin" || rep.Verified || rep.Key != "" {
		t.Fatalf("hold: %+v %v, want erin unverified", rep, err)
	}
}

// TestSecurityWhoDidIt_HoldProofConsumedOnce (docs/security.md "Who did
// it": a command proof is consumed once; docs/adr/0030 legal holds): a
// hold's proof sent again with another command id places no second hold
// (proof_refused, proof_used), while its own command id still answers the
// hold it placed; a release's proof cannot release another hold of the
// run, one placed after it included; and a signed release must name its
// hold (invalid_request), so that its proof states which.
func TestSecurityWhoDidIt_HoldProofConsumedOnce(t *testing.T) {
	t.Parallel()
	carol, carolPub := userKey(t, 4)
	people := approvers.People{Keys: []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}, Require: true}
	h := keepHarness(t, people, "done-1")
	c := ctx(t)
	exp := time.Now().Add(30 * time.Second)

	holdProof := signCommand(t, carol, proof.HoldSubject("done-1", "dispute"), exp)
	h1, err := h.client.Hold(c, api.HoldRequest{CommandID: "h-a", Run: "done-1", Reason: "dispute", Proof: holdProof})
	if err != nil || h1.Hold != "h1" {
		t.Fatalf("hold: %+v %v", h1, err)
	}
	_, err = h.client.Hold(c, api.HoldRequest{CommandID: "h-b", Run: "done-1", Reason: "dispute", Proof: holdProof})
	refusedCode(t, "the hold's proof with another command id", err, weft.CodeProofRefused, proof.ReasonProofUsed)
	if again, err := h.client.Hold(c, api.HoldRequest{CommandID: "h-a", Run: "done-1", Reason: "dispute", Proof: holdProof}); err != nil || again.Hold != "h1" {
		t.Fatalf("the hold's own command id again: %+v %v, want h1", again, err)
	}

	// A signed release names its hold.
	unnamed := signCommand(t, carol, proof.ReleaseHoldSubject("done-1", "", "settled"), exp)
	_, err = h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-unnamed", Run: "done-1", Reason: "settled", Proof: unnamed})
	refusedCode(t, "a signed release naming no hold", err, weft.CodeInvalidRequest, "")

	// A release's proof is consumed by its release: the same statement by
	// the same key releases nothing else, even a hold placed since with
	// the same id (it cannot be: ids are not reused) or under another
	// command id.
	relProof := signCommand(t, carol, proof.ReleaseHoldSubject("done-1", "h1", "settled"), exp)
	if rel, err := h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-a", Run: "done-1", Hold: "h1", Reason: "settled", Proof: relProof}); err != nil || rel.Released == nil {
		t.Fatalf("release: %+v %v", rel, err)
	}
	h2, err := h.client.Hold(c, api.HoldRequest{CommandID: "h-c", Run: "done-1", Reason: "subpoena", Proof: signCommand(t, carol, proof.HoldSubject("done-1", "subpoena"), exp)})
	if err != nil || h2.Hold != "h2" {
		t.Fatalf("second hold: %+v %v", h2, err)
	}
	_, err = h.client.ReleaseHold(c, api.ReleaseHoldRequest{CommandID: "r-b", Run: "done-1", Hold: "h1", Reason: "settled", Proof: relProof})
	refusedCode(t, "the release's proof with another command id", err, weft.CodeProofRefused, proof.ReasonProofUsed)
	hs, err := retention.HoldsOf(c, h.srv.JS, "done-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Active() || !hs[1].Active() {
		t.Fatalf("weft_holds keeps %+v, want h1 released and h2 active", hs)
	}
}

// TestSecurityWhoDidIt_SignedRetryAfterExpiry (docs/security.md "Who did
// it"; docs/semantics.md §8, a run can always be answered): a hold, a
// release or a restart that took effect, retried with the same command
// (its claim released, so the runner answers it again) once its proof has
// expired, is answered what it did — the hold, the release, the run
// already started with the same input — not proof_expired.
func TestSecurityWhoDidIt_SignedRetryAfterExpiry(t *testing.T) {
	t.Parallel()
	carol, carolPub := userKey(t, 4)
	people := approvers.People{Keys: []approvers.Key{{Public: carolPub, Reviewer: "carol@ops"}}, Require: true}
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	_, r := keepHarnessOn(t, people, []runner.Option{runner.WithClock(clock)}, "done-1")
	c := ctx(t)
	exp := clock().Add(30 * time.Second)

	hold := api.HoldRequest{CommandID: "h-a", Run: "done-1", Reason: "dispute", Proof: signCommand(t, carol, proof.HoldSubject("done-1", "dispute"), exp)}
	if _, err := r.Hold(c, hold); err != nil {
		t.Fatal(err)
	}
	release := api.ReleaseHoldRequest{CommandID: "r-a", Run: "done-1", Hold: "h1", Reason: "settled", Proof: signCommand(t, carol, proof.ReleaseHoldSubject("done-1", "h1", "settled"), exp)}
	if _, err := r.ReleaseHold(c, release); err != nil {
		t.Fatal(err)
	}
	restart := api.RestartRequest{CommandID: "re-a", Run: "re-1", From: api.RestartFrom{Run: "done-1", Turn: 1}, Reason: "tool fixed", Proof: signCommand(t, carol, proof.RestartSubject("done-1", 1, "re-1", "tool fixed"), exp)}
	if _, err := r.Restart(c, restart); err != nil {
		t.Fatal(err)
	}

	skew.Store(int64(time.Hour)) // every proof above has expired
	other := api.HoldRequest{CommandID: "h-x", Run: "done-1", Reason: "dispute", Proof: signCommand(t, carol, proof.HoldSubject("done-1", "dispute"), exp)}
	_, err := r.Hold(c, other)
	refusedCode(t, "a new hold with an expired proof", err, weft.CodeProofRefused, proof.ReasonProofExpired)
	if got, err := r.Hold(c, hold); err != nil || got.Hold != "h1" || !got.Verified || got.By != "carol@ops" {
		t.Fatalf("the hold retried after its proof expired: %+v %v, want h1 by carol@ops verified", got, err)
	}
	if got, err := r.ReleaseHold(c, release); err != nil || got.Released == nil || !got.Released.Verified || got.Released.Reason != "settled" {
		t.Fatalf("the release retried after its proof expired: %+v %v, want h1 released by carol@ops verified", got, err)
	}
	_, err = r.Restart(c, restart)
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput == nil || !*we.SameInput {
		t.Fatalf("the restart retried after its proof expired: %v, want already_started with the same input", err)
	}
	// Another restart into re-1 with an expired proof is judged by its
	// proof: this proof is not the one re-1 records.
	moved := restart
	moved.Proof = signCommand(t, carol, proof.RestartSubject("done-1", 1, "re-1", "tool fixed"), exp.Add(time.Second))
	_, err = r.Restart(c, moved)
	refusedCode(t, "another restart into re-1 with an expired proof", err, weft.CodeProofRefused, proof.ReasonProofExpired)
}
