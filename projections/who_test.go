package projections_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/proof"
)

// whoRun is projtest.WhoRun signed by a new key: its events, the key and
// its key pair.
func whoRun(t *testing.T, run string) ([]events.Event, string, nkeys.KeyPair) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	evs, err := projtest.WhoRun(run, pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return evs, pub, kp
}

// who is what the view and the who lines (Deeds) say of the people's
// commands of h: verified or not for the answer, the reconciliation, the
// resolution and the cancellation, the view's and the deeds' alike.
func who(t *testing.T, h []events.Recorded) (view, deeds [4]bool, problems []string) {
	t.Helper()
	v := projections.Fold(h)
	a, ok := v.Action("1/p")
	if !ok || len(a.Approvals) != 1 || a.Reconciled == nil || a.Question == nil || a.Question.Resolution == nil || v.Cancelled == nil {
		t.Fatalf("view lacks the people's commands: %+v cancelled %+v", a, v.Cancelled)
	}
	if a.Question.Verified != a.Reconciled.Verified {
		t.Fatalf("the question says verified %t, the reconciliation %t", a.Question.Verified, a.Reconciled.Verified)
	}
	view = [4]bool{a.Approvals[0].Verified, a.Reconciled.Verified, a.Question.Resolution.Verified, v.Cancelled.Verified}
	ds := projections.Deeds(h)
	if len(ds) != 4 {
		t.Fatalf("deeds %+v, want 4", ds)
	}
	for i, d := range ds {
		deeds[i] = d.Who.Verified
		if !d.Claimed {
			t.Errorf("deed %d (%s) claims no identity", d.Version, d.What)
		}
		if d.Who.Verified != (d.Problem == "") {
			t.Errorf("deed %d (%s): verified %t, problem %q", d.Version, d.What, d.Who.Verified, d.Problem)
		}
		problems = append(problems, d.Problem)
	}
	return view, deeds, problems
}

// TestSecurityWhoDidIt_ViewCatchesEdits (docs/security.md, "Who did it"):
// the view and the who lines re-check every recorded proof against the
// event and the run as the log records them, so a signed command whose
// content, reason, run, key or proof was edited afterwards reads
// unverified, and so does an answer whose proof was signed for another
// run, or whose recorded key is not the proof's.
func TestSecurityWhoDidIt_ViewCatchesEdits(t *testing.T) {
	evs, _, _ := whoRun(t, "w-1")
	if view, deeds, problems := who(t, history("w-1", evs...)); view != [4]bool{true, true, true, true} || deeds != view {
		t.Fatalf("untouched: view %v deeds %v (%q), want all verified", view, deeds, problems)
	}
	other, otherKey, _ := whoRun(t, "w-2")
	edit := func(i int, f func(events.Event) events.Event) []events.Event {
		out := append([]events.Event{}, evs...)
		out[i] = f(out[i])
		return out
	}
	reconcile := func(f func(*events.Reconciled)) []events.Event {
		return edit(projtest.WhoReconciled, func(e events.Event) events.Event { r := e.(events.Reconciled); f(&r); return r })
	}
	answer := func(f func(*events.ApprovalAnswered)) []events.Event {
		return edit(projtest.WhoApproved, func(e events.Event) events.Event { r := e.(events.ApprovalAnswered); f(&r); return r })
	}
	for _, c := range []struct {
		name    string
		run     string
		evs     []events.Event
		want    [4]bool
		problem string
	}{
		{"reconcile content edited", "w-1", reconcile(func(r *events.Reconciled) { r.Content = json.RawMessage(`{"unconfirmed":"never paid"}`) }), [4]bool{true, false, true, true}, proof.ReasonOtherContent},
		{"reconcile reason edited", "w-1", reconcile(func(r *events.Reconciled) { r.Reason = "because" }), [4]bool{true, false, true, true}, proof.ReasonOtherReason},
		{"reconcile of another action", "w-1", reconcile(func(r *events.Reconciled) { p := *r.Proof; p.Action = "1/q"; r.Proof = &p }), [4]bool{true, false, true, true}, proof.ReasonOtherAction},
		{"reconcile key not the proof's", "w-1", reconcile(func(r *events.Reconciled) { r.Key = otherKey }), [4]bool{true, false, true, true}, "is not the proof's key"},
		{"reconcile verified without a proof", "w-1", reconcile(func(r *events.Reconciled) { r.Proof = nil }), [4]bool{true, false, true, true}, "no command proof"},
		{"reconcile proof signed by another key", "w-1", reconcile(func(r *events.Reconciled) { p := *r.Proof; p.Key = otherKey; r.Proof, r.Key = &p, otherKey }), [4]bool{true, false, true, true}, "bad_signature"},
		{"resolve content edited", "w-1", edit(projtest.WhoResolved, func(e events.Event) events.Event {
			r := e.(events.Resolved)
			r.Content = json.RawMessage(`{"error":"declined"}`)
			return r
		}), [4]bool{true, true, false, true}, proof.ReasonOtherContent},
		{"cancel reason edited", "w-1", edit(projtest.WhoCancelled, func(e events.Event) events.Event {
			r := e.(events.CancelRequested)
			r.Reason = "no reason"
			return r
		}), [4]bool{true, true, true, false}, proof.ReasonOtherReason},
		{"cancel proof not vouched for", "w-1", edit(projtest.WhoCancelled, func(e events.Event) events.Event {
			r := e.(events.CancelRequested)
			r.Identity = events.Identity{}
			return r
		}), [4]bool{true, true, true, false}, "vouched for its proof"},
		{"answer proof signed for another run", "w-1", answer(func(a *events.ApprovalAnswered) {
			p := *other[projtest.WhoApproved].(events.ApprovalAnswered).Proof
			a.Proof, a.Key = &p, otherKey
		}), [4]bool{false, true, true, true}, "other_run"},
		{"answer key not the proof's", "w-1", answer(func(a *events.ApprovalAnswered) { a.Key = otherKey }), [4]bool{false, true, true, true}, "is not the proof's key"},
		{"answer verified without a proof", "w-1", answer(func(a *events.ApprovalAnswered) { a.Proof = nil }), [4]bool{false, true, true, true}, "no approval proof"},
		{"every command moved to another run", "w-3", evs, [4]bool{false, false, false, false}, "other_run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			view, deeds, problems := who(t, history(c.run, c.evs...))
			if view != c.want || deeds != c.want {
				t.Fatalf("view %v deeds %v (%q), want %v", view, deeds, problems, c.want)
			}
			for i, ok := range c.want {
				if !ok && !strings.Contains(problems[i], c.problem) {
					t.Errorf("deed %d's problem %q does not say %q", i, problems[i], c.problem)
				}
			}
		})
	}
}

// beforeIdentity decodes the payload of name as written before events
// carried who made a person's command (events/testdata/encoding/before-identity).
func beforeIdentity(t *testing.T, file string, name events.Name) events.Event {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "events", "testdata", "encoding", "before-identity", file+".v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(name, 1, json.RawMessage(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatalf("%s no longer decodes: %v", file, err)
	}
	return e
}

// TestSecurityWhoDidIt_BeforeIdentity (docs/security.md, "Who did it";
// docs/semantics.md §10): logs written before events carried an identity
// fold as they read then. An answer with a signed approval proof that
// checks against its request reads verified, with the proof's key; an
// answer whose proof does not check, and a reconciliation, a resolution
// and a cancellation (which had no proofs), read unverified under the
// typed name.
func TestSecurityWhoDidIt_BeforeIdentity(t *testing.T) {
	req := events.Requirement{Name: "refund-review", Version: 2}
	run := func(id string, args string, answer events.Event, rest ...events.Event) []events.Recorded {
		return history(id, append([]events.Event{
			events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Runner: "r"},
			events.ModelRequested{Turn: 1, Incarnation: 1},
			events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "refund", Arguments: json.RawMessage(args)}}},
			events.CallValidated{Action: "1/c1", Tool: "refund", Outcome: events.CallValid},
			events.PolicyDecided{Action: "1/c1", Decision: events.PolicyRequireApproval, Requirement: &req},
			events.ApprovalRequested{Action: "1/c1", Revision: 3, Requirement: req},
			answer,
		}, rest...)...)
	}

	signed := projections.Fold(run("r-old", `{"amount":80}`, beforeIdentity(t, "approval_answered_signed", events.NameApprovalAnswered)))
	a, _ := signed.Action("1/c1")
	h := a.Approvals[0]
	if h.Proof == nil || !h.Proof.Verified || !h.Verified || h.Reviewer != "demo approver" {
		t.Fatalf("a signed answer from before: verified %t, proof %+v, reviewer %q; want verified", h.Verified, h.Proof, h.Reviewer)
	}
	ds := projections.Deeds(run("r-old", `{"amount":80}`, beforeIdentity(t, "approval_answered_signed", events.NameApprovalAnswered)))
	if len(ds) != 1 || ds[0].Who.Describe() != "by demo approver (verified, key "+h.Proof.Key+")" {
		t.Fatalf("who lines %+v", ds)
	}

	h1 := run("r-1", `{"amount":1}`, beforeIdentity(t, "approval_answered", events.NameApprovalAnswered),
		events.ActionQueued{Action: "1/c1"},
		events.AttemptFenced{Action: "1/c1", Attempt: 1},
		events.AttemptReported{Action: "1/c1", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "timed out"},
		beforeIdentity(t, "reconciled", events.NameReconciled),
		beforeIdentity(t, "resolved", events.NameResolved),
		beforeIdentity(t, "cancel_requested", events.NameCancelRequested),
	)
	v := projections.Fold(h1)
	a, _ = v.Action("1/c1")
	if h := a.Approvals[0]; h.Verified || h.Proof == nil || h.Proof.Verified || h.Reviewer != "alice" {
		t.Fatalf("an answer whose proof does not check: verified %t, proof %+v, reviewer %q; want unverified by alice", h.Verified, h.Proof, h.Reviewer)
	}
	if a.Reconciled == nil || *a.Reconciled != (projections.PersonView{By: "carol", At: h1[10].At}) || a.Question == nil || a.Question.By != "carol" || a.Question.Verified {
		t.Fatalf("reconciled %+v question %+v; want carol, unverified", a.Reconciled, a.Question)
	}
	if r := a.Question.Resolution; r == nil || r.By != "erin" || r.Verified {
		t.Fatalf("resolution %+v; want erin, unverified", r)
	}
	if v.Cancelled == nil || *v.Cancelled != (projections.PersonView{By: "dave", Reason: "customer left", At: h1[12].At}) {
		t.Fatalf("cancelled %+v; want dave, unverified", v.Cancelled)
	}
	var lines []string
	for _, d := range projections.Deeds(h1) {
		if d.Claimed != (d.What == "approve 1/c1") || d.Problem != "" && d.What != "approve 1/c1" {
			t.Errorf("deed %+v", d)
		}
		lines = append(lines, d.What+" "+d.Who.Describe())
	}
	want := []string{"approve 1/c1 by alice (unverified)", "reconcile_stored 1/c1 (unconfirmed) by carol (unverified)",
		"resolve 1/c1 (output) by erin (unverified)", "cancel by dave (unverified)"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("who lines:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestSecurityWhoDidIt_PauseAndResume (docs/security.md, "Who did it";
// docs/semantics.md §13): a signed pause and resume read verified, with
// the key, in the run view and the who lines, re-checked against the
// event as recorded: a reason edited afterwards, or a pause's proof under
// a resume, reads unverified naming why; a pause recorded before the
// events carried an identity (events/testdata/encoding/before-identity)
// reads unverified under the typed name, claiming nothing.
func TestSecurityWhoDidIt_PauseAndResume(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	started := events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Runner: "r"}
	paused, resumed, err := projtest.PauseAndResume("w-p", pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	lines := func(h []events.Recorded) string {
		var out []string
		for _, d := range projections.Deeds(h) {
			s := d.What + " " + d.Who.Describe()
			if d.Problem != "" {
				s += ": " + d.Problem
			}
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}

	h := history("w-p", started, paused)
	if p := projections.Fold(h).Pause; p == nil || !p.Verified || p.Key != pub || p.By != "alice" {
		t.Fatalf("signed pause: view %+v, want alice verified by %s", p, pub)
	}
	if got, want := lines(history("w-p", started, paused, resumed)), "pause by alice (verified, key "+pub+")\nresume by alice (verified, key "+pub+")"; got != want {
		t.Fatalf("who lines:\n%s\nwant\n%s", got, want)
	}

	edited := paused
	edited.Reason = "no reason"
	if p := projections.Fold(history("w-p", started, edited)).Pause; p == nil || p.Verified || p.By != "alice" {
		t.Fatalf("pause with its reason edited: view %+v, want alice unverified", p)
	}
	if got := lines(history("w-p", started, edited)); !strings.Contains(got, "pause by alice (unverified)") || !strings.Contains(got, proof.ReasonOtherReason) {
		t.Fatalf("pause with its reason edited: who lines %q, want unverified, %s", got, proof.ReasonOtherReason)
	}
	swapped := resumed
	if swapped.Proof, err = projtest.CommandProof(proof.CommandSubject{Command: proof.CommandPause, Run: "w-p", Reason: "vendor confirmed"}, pub, kp.Sign, t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := lines(history("w-p", started, paused, swapped)); !strings.Contains(got, "resume by alice (unverified)") || !strings.Contains(got, proof.ReasonOtherCommand) {
		t.Fatalf("resume under a pause's proof: who lines %q, want unverified, %s", got, proof.ReasonOtherCommand)
	}

	old := history("w-p", started, beforeIdentity(t, "run_paused", events.NameRunPaused), beforeIdentity(t, "run_resumed", events.NameRunResumed))
	if p := projections.Fold(old[:2]).Pause; p == nil || *p != (projections.PauseView{By: "dave", Reason: "checking the vendor", Since: old[1].At}) {
		t.Fatalf("a pause from before: view %+v, want dave unverified", p)
	}
	for _, d := range projections.Deeds(old) {
		if d.Claimed || d.Problem != "" {
			t.Errorf("a deed from before claims an identity: %+v", d)
		}
	}
	if got, want := lines(old), "pause by dave (unverified)\nresume by erin (unverified)"; got != want {
		t.Fatalf("who lines from before:\n%s\nwant\n%s", got, want)
	}
}
