package projtest

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// The indexes of the people's commands in WhoRun's events.
const (
	// WhoApproved is the index of the signed answer.
	WhoApproved = 6
	// WhoReconciled is the index of the signed reconciliation.
	WhoReconciled = 10
	// WhoResolved is the index of the signed resolution.
	WhoResolved = 12
	// WhoCancelled is the index of the signed cancellation.
	WhoCancelled = 13
)

// WhoRun returns the events of run, a run whose people all sign
// (docs/security.md, "Who did it"): the key pub (its Sign function sign)
// approves the payment 1/p with a signed approval proof, the attempt ends
// uncertain, and pub reconciles it as unconfirmed, resolves it and cancels
// the run, each with a signed command proof; every proof expires at
// expires, every identity is verified by pub. The commands are at the
// indexes WhoApproved, WhoReconciled, WhoResolved and WhoCancelled.
func WhoRun(run, pub string, sign func([]byte) ([]byte, error), expires time.Time) ([]events.Event, error) {
	req := events.Requirement{Name: "finance", Version: 1}
	args := json.RawMessage(`{"amount":80}`)
	ap, err := proof.New(proof.Subject{Run: run, Action: "1/p", Revision: 1, Requirement: req, Tool: "pay", Arguments: args, Answer: events.AnswerApprove}, pub, expires)
	if err == nil {
		ap, err = proof.Sign(ap, sign)
	}
	if err != nil {
		return nil, err
	}
	command := func(s proof.CommandSubject) *events.CommandProof {
		p, e := CommandProof(s, pub, sign, expires)
		if err == nil {
			err = e
		}
		return p
	}
	id := events.Identity{Verified: true, Key: pub}
	note := json.RawMessage(`{"unconfirmed":"checking with the bank"}`)
	paid := json.RawMessage(`{"id":"PAY-1","status":"sent"}`)
	evs := []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay 80", Runner: "runner-1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "p", Name: "pay", Arguments: args}}},
		events.CallValidated{Action: "1/p", Turn: 1, CallID: "p", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/p", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/p", Revision: 1, Requirement: req, Expires: &expires, Why: events.AskPolicy},
		events.ApprovalAnswered{Action: "1/p", Revision: 1, Requirement: req, Answer: events.AnswerApprove, Reviewer: "alice", Verifier: "keys", Identity: id, Proof: &ap},
		events.ActionQueued{Action: "1/p", Why: events.QueuedApproved, Config: events.ToolConfig{Timeout: 60000, MaxAttempts: 1}},
		events.AttemptFenced{Action: "1/p", Tool: "pay", Attempt: 1, Incarnation: 1, Timeout: 60000, MaxAttempts: 1},
		events.AttemptReported{Action: "1/p", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "gateway timed out"},
		events.Reconciled{Action: "1/p", Kind: events.ReconciledUnconfirmed, Content: note, By: "alice", Reason: "the bank is checking", Identity: id,
			Proof: command(proof.CommandSubject{Command: proof.CommandReconcile, Run: run, Action: "1/p", Content: note, Reason: "the bank is checking"})},
		events.ModelRequested{Turn: 2, Incarnation: 1, Why: events.TurnToolResults},
		events.Resolved{Action: "1/p", Kind: events.ReconciledOutput, Content: paid, By: "alice", Reason: "the bank confirmed", Identity: id,
			Proof: command(proof.CommandSubject{Command: proof.CommandResolve, Run: run, Action: "1/p", Content: paid, Reason: "the bank confirmed"})},
		events.CancelRequested{By: "alice", Reason: "customer left", Identity: id,
			Proof: command(proof.CommandSubject{Command: proof.CommandCancel, Run: run, Reason: "customer left"})},
	}
	return evs, err
}

// CommandProof returns the command proof of s signed by the key pub (its
// Sign function sign), expiring at expires.
func CommandProof(s proof.CommandSubject, pub string, sign func([]byte) ([]byte, error), expires time.Time) (*events.CommandProof, error) {
	p, err := proof.NewCommand(s, pub, expires)
	if err == nil {
		p, err = proof.SignCommand(p, sign)
	}
	return &p, err
}

// PauseAndResume returns a pause and a resume of run by alice, each with
// its reason and a command proof signed by the key pub (its Sign function
// sign, expiring at expires), their identities verified by pub: the
// signed pause and resume the who tests read (docs/semantics.md §13).
func PauseAndResume(run, pub string, sign func([]byte) ([]byte, error), expires time.Time) (events.RunPaused, events.RunResumed, error) {
	id := events.Identity{Verified: true, Key: pub}
	pp, err := CommandProof(proof.CommandSubject{Command: proof.CommandPause, Run: run, Reason: "checking the vendor"}, pub, sign, expires)
	if err != nil {
		return events.RunPaused{}, events.RunResumed{}, err
	}
	rp, err := CommandProof(proof.CommandSubject{Command: proof.CommandResume, Run: run, Reason: "vendor confirmed"}, pub, sign, expires)
	return events.RunPaused{By: "alice", Reason: "checking the vendor", Identity: id, Proof: pp},
		events.RunResumed{By: "alice", Reason: "vendor confirmed", Identity: id, Proof: rp}, err
}
