package audit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/proof"
)

// exported writes envs as an export and reads them back, as verify --file
// reads them.
func exported(t *testing.T, envs []events.Envelope) []events.Envelope {
	t.Helper()
	var buf bytes.Buffer
	if err := audit.Export(&buf, envs); err != nil {
		t.Fatal(err)
	}
	got, err := audit.ReadExport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSecurityWhoDidIt_AuditCatchesEditedCommands (docs/security.md, "Who
// did it"): audit verify re-checks every proof recorded with a person's
// command, as the view does. An export whose signed reconcile, resolve or
// cancel was edited (content, reason, key, proof) and its chain recomputed
// fails with proof at that event, as an edited signed answer does; so does
// an answer that claims a verified identity without its proof. The
// untouched export verifies, with every command's proof re-checked.
func TestSecurityWhoDidIt_AuditCatchesEditedCommands(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	other, _ := nkeys.CreateUser()
	otherKey, _ := other.PublicKey()
	evs, err := projtest.WhoRun("w-1", pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rep := audit.Verify(exported(t, chain(t, "w-1", evs)))
	if !rep.OK() || len(rep.Proofs) != 4 {
		t.Fatalf("untouched: problem %+v, proofs %+v; want ok with 4 proofs", rep.Problem, rep.Proofs)
	}
	for i, c := range rep.Proofs {
		if want := []string{"", "reconcile", "resolve", "cancel"}[i]; !c.Verified || c.Command != want || c.Key != pub || c.Reviewer != "alice" {
			t.Errorf("proof check %d: %+v, want the %q by alice, key %s, verified", i, c, want, pub)
		}
	}

	edit := func(i int, f func(events.Event) events.Event) []events.Event {
		out := append([]events.Event{}, evs...)
		out[i] = f(out[i])
		return out
	}
	for _, c := range []struct {
		name   string
		at     int
		evs    []events.Event
		reason string
	}{
		{"reconcile content edited", projtest.WhoReconciled, edit(projtest.WhoReconciled, func(e events.Event) events.Event {
			r := e.(events.Reconciled)
			r.Content = json.RawMessage(`{"unconfirmed":"never sent"}`)
			return r
		}), "other_content"},
		{"reconcile reason edited", projtest.WhoReconciled, edit(projtest.WhoReconciled, func(e events.Event) events.Event {
			r := e.(events.Reconciled)
			r.Reason = "I said so"
			return r
		}), "other_reason"},
		{"reconcile key edited", projtest.WhoReconciled, edit(projtest.WhoReconciled, func(e events.Event) events.Event {
			r := e.(events.Reconciled)
			p := *r.Proof
			p.Key, r.Key, r.Proof = otherKey, otherKey, &p
			return r
		}), "bad_signature"},
		{"resolve content edited", projtest.WhoResolved, edit(projtest.WhoResolved, func(e events.Event) events.Event {
			r := e.(events.Resolved)
			r.Content = json.RawMessage(`{"error":"declined"}`)
			return r
		}), "other_content"},
		{"cancel reason edited", projtest.WhoCancelled, edit(projtest.WhoCancelled, func(e events.Event) events.Event {
			r := e.(events.CancelRequested)
			r.Reason = "none"
			return r
		}), "other_reason"},
		{"cancel proof removed", projtest.WhoCancelled, edit(projtest.WhoCancelled, func(e events.Event) events.Event {
			r := e.(events.CancelRequested)
			r.Proof = nil
			return r
		}), "no command proof"},
		{"answer verified without its proof", projtest.WhoApproved, edit(projtest.WhoApproved, func(e events.Event) events.Event {
			r := e.(events.ApprovalAnswered)
			r.Proof = nil
			return r
		}), "no approval proof"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := audit.Verify(exported(t, chain(t, "w-1", c.evs))).Problem
			if p == nil || p.Kind != audit.KindProof || p.Version != uint64(c.at+1) || !strings.Contains(p.Message, c.reason) {
				t.Fatalf("problem %+v; want proof at event %d saying %q", p, c.at+1, c.reason)
			}
			t.Log(p.Message)
		})
	}
}

// TestSecurityWhoDidIt_ViewBeforeUpgrade (docs/security.md, "Who did
// it"): a run view stored before the runtime recorded who made the
// people's commands lacks those fields (the projector applies only new
// events to a stored view), so it differs from the refold: audit verify
// fails view and says the difference is only that, and to run weft
// rebuild. A stored view edited otherwise does not get that advice.
func TestSecurityWhoDidIt_ViewBeforeUpgrade(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	evs, err := projtest.WhoRun("w-1", pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	envs := chain(t, "w-1", evs)
	current, _ := projections.Fold(recorded(t, envs)).Encode()
	if rep := audit.Verify(envs, audit.WithView(current)); !rep.OK() {
		t.Fatalf("the current view: %+v", rep.Problem)
	}
	var old map[string]any
	if err := json.Unmarshal(current, &old); err != nil {
		t.Fatal(err)
	}
	// What the view of this history was before: no cancelled, reconciled,
	// verified (an answer's proof status had it), and no reason on a
	// resolution.
	delete(old, "cancelled")
	a := old["actions"].([]any)[0].(map[string]any)
	delete(a, "reconciled")
	delete(a["approvals"].([]any)[0].(map[string]any), "verified")
	q := a["question"].(map[string]any)
	delete(q, "verified")
	delete(q["resolution"].(map[string]any), "verified")
	delete(q["resolution"].(map[string]any), "reason")
	before, _ := json.Marshal(old)
	p := audit.Verify(envs, audit.WithView(before)).Problem
	if p == nil || p.Kind != audit.KindView || !strings.Contains(p.Message, "run `weft rebuild` after the upgrade") {
		t.Fatalf("a view from before the upgrade: %+v; want view, saying to run weft rebuild", p)
	}
	old["status"] = "finished"
	edited, _ := json.Marshal(old)
	p = audit.Verify(envs, audit.WithView(edited)).Problem
	if p == nil || p.Kind != audit.KindView || strings.Contains(p.Message, "weft rebuild") {
		t.Fatalf("an edited view: %+v; want view, without the advice", p)
	}
}

// TestSecurityWhoDidIt_AuditCatchesEditedPause (docs/security.md, "Who
// did it"; docs/semantics.md §13): audit verify re-checks the command
// proofs of a pause and a resume as it does a cancel's: untouched they
// verify and are listed; a pause whose reason was edited, or a resume that
// says the deployment vouched without its proof, fails proof at that
// event.
func TestSecurityWhoDidIt_AuditCatchesEditedPause(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	started := events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}}
	paused, resumed, err := projtest.PauseAndResume("w-p", pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	rep := audit.Verify(exported(t, chain(t, "w-p", []events.Event{started, paused, resumed})))
	if !rep.OK() || len(rep.Proofs) != 2 {
		t.Fatalf("untouched: problem %+v, proofs %+v; want ok with 2 proofs", rep.Problem, rep.Proofs)
	}
	for i, c := range rep.Proofs {
		if want := []string{proof.CommandPause, proof.CommandResume}[i]; !c.Verified || c.Command != want || c.Key != pub || c.Reviewer != "alice" {
			t.Errorf("proof check %d: %+v, want the %q by alice, key %s, verified", i, c, want, pub)
		}
	}
	edited := paused
	edited.Reason = "none"
	unproved := resumed
	unproved.Proof = nil
	for _, c := range []struct {
		name   string
		evs    []events.Event
		at     uint64
		reason string
	}{
		{"pause reason edited", []events.Event{started, edited, resumed}, 2, "other_reason"},
		{"resume proof removed", []events.Event{started, paused, unproved}, 3, "no command proof"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := audit.Verify(exported(t, chain(t, "w-p", c.evs))).Problem
			if p == nil || p.Kind != audit.KindProof || p.Version != c.at || !strings.Contains(p.Message, c.reason) {
				t.Fatalf("problem %+v; want proof at event %d saying %q", p, c.at, c.reason)
			}
		})
	}
}

// TestSecurityWhoDidIt_AuditCatchesAReusedCommandProof (docs/security.md,
// "Who did it": a command proof is consumed once): the runtime refuses a
// command proof the run already recorded (proof_used), so a history that
// records one twice — a pause proof replayed after the resume, written
// into an export with the chain recomputed, or by a runner without that
// check — fails verify with proof at the second event, naming the run, the
// key, the proof's digest and the event that used it first. The history
// without the replay verifies.
func TestSecurityWhoDidIt_AuditCatchesAReusedCommandProof(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	started := events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}}
	paused, resumed, err := projtest.PauseAndResume("w-r", pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep := audit.Verify(exported(t, chain(t, "w-r", []events.Event{started, paused, resumed}))); !rep.OK() {
		t.Fatalf("untouched: %+v", rep.Problem)
	}

	rep := audit.Verify(exported(t, chain(t, "w-r", []events.Event{started, paused, resumed, paused})))
	p := rep.Problem
	digest := fmt.Sprintf("%x", proof.CommandDigest(*paused.Proof))
	if p == nil || p.Kind != audit.KindProof || p.Version != 4 {
		t.Fatalf("replayed pause: problem %+v; want proof at event 4", p)
	}
	for _, want := range []string{"run w-r event 4", "key " + pub, "digest " + digest, "already recorded with event 2", proof.ReasonProofUsed} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("the problem %q does not say %q", p.Message, want)
		}
	}
	if n := len(rep.Proofs); n != 3 || rep.Proofs[2].Verified || rep.Proofs[2].UsedAt != 2 || rep.Proofs[2].Digest != digest {
		t.Errorf("proof checks %+v; want the third unverified, used at event 2", rep.Proofs)
	}
}

// rejected is a run whose payment a signed reject answers with reason,
// signed by kp stating the reason when signReason (the v3 digest), else
// stating none (a proof signed before proofs stated reasons).
func rejected(t *testing.T, run string, kp nkeys.KeyPair, reason string, signReason bool) []events.Event {
	t.Helper()
	pub, _ := kp.PublicKey()
	req := events.Requirement{Name: "finance", Version: 1}
	args := json.RawMessage(`{"amount":80}`)
	expires := t0.Add(24 * time.Hour)
	s := proof.Subject{Run: run, Action: "1/p", Revision: 1, Requirement: req, Tool: "pay", Arguments: args, Answer: events.AnswerReject}
	if signReason {
		s.Reason = reason
	}
	p, err := proof.New(s, pub, expires)
	if err == nil {
		p, err = proof.Sign(p, kp.Sign)
	}
	if err != nil {
		t.Fatal(err)
	}
	return []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay 80", Runner: "runner-1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "p", Name: "pay", Arguments: args}}},
		events.CallValidated{Action: "1/p", Turn: 1, CallID: "p", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/p", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/p", Revision: 1, Requirement: req, Expires: &expires, Why: events.AskPolicy},
		events.ApprovalAnswered{Action: "1/p", Revision: 1, Requirement: req, Answer: events.AnswerReject, Reason: reason, Reviewer: "alice", Verifier: "keys",
			Identity: events.Identity{Verified: true, Key: pub}, Proof: &p},
	}
}

// TestSecurityWhoDidIt_AuditCatchesAnEditedRejectReason (docs/security.md,
// "Signed approval proofs"; docs/protocol/20-events.md, the v3 digest): a
// reject signed with its reason verifies; the same export with the reason
// edited, or removed, and the chain recomputed fails proof (other_reason)
// at the answer. A reject whose proof states no reason (signed before
// proofs stated reasons) still verifies, its check saying the reason is
// not signed.
func TestSecurityWhoDidIt_AuditCatchesAnEditedRejectReason(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	const reason = "the invoice is a duplicate"
	evs := rejected(t, "rj-1", kp, reason, true)
	rep := audit.Verify(exported(t, chain(t, "rj-1", evs)))
	if !rep.OK() || len(rep.Proofs) != 1 || !rep.Proofs[0].Verified || rep.Proofs[0].ReasonUnsigned {
		t.Fatalf("untouched: %+v %+v; want ok, the reject's proof verified with its reason signed", rep.Problem, rep.Proofs)
	}
	at := len(evs)
	for _, edited := range []string{"the invoice was paid by card", ""} {
		out := append([]events.Event{}, evs...)
		ans := out[at-1].(events.ApprovalAnswered)
		ans.Reason = edited
		out[at-1] = ans
		p := audit.Verify(exported(t, chain(t, "rj-1", out))).Problem
		if p == nil || p.Kind != audit.KindProof || p.Version != uint64(at) || !strings.Contains(p.Message, proof.ReasonOtherReason) {
			t.Errorf("reason edited to %q: %+v; want proof at event %d saying %s", edited, p, at, proof.ReasonOtherReason)
		}
	}

	old := audit.Verify(exported(t, chain(t, "rj-2", rejected(t, "rj-2", kp, reason, false))))
	if !old.OK() || len(old.Proofs) != 1 || !old.Proofs[0].Verified || !old.Proofs[0].ReasonUnsigned {
		t.Fatalf("a proof stating no reason: %+v %+v; want ok, verified, its reason unsigned", old.Problem, old.Proofs)
	}
}
