package events

// NameRunPaused is the stored name of RunPaused, a run a person paused.
const NameRunPaused Name = "run_paused"

// NameRunResumed is the stored name of RunResumed, a paused run a person resumed.
const NameRunResumed Name = "run_resumed"

// RunPaused is emitted when a person pauses a run (docs/semantics.md §13):
// from it until RunResumed the run starts no model call and no tool body
// (no ModelRequested for a new turn, no AttemptFenced, and a turn requested
// before is not called). Work in flight finishes and is recorded; approvals
// and reconciliations are still answered; recorded deadlines keep running.
// By is who paused it, Reason why, Identity and Proof whether the
// deployment vouches for By, as for CancelRequested.
type RunPaused struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Identity says whether the deployment vouches for By (a signed
	// command proof by one of its keys).
	Identity
	// Proof is the signed command proof the pause was made with.
	Proof *CommandProof `json:"proof,omitempty"`
}

// RunResumed is emitted when a person resumes a paused run: what the run's
// state calls for is started again in the same decision (fences, the next
// model turn). By, Reason, Identity and Proof as for RunPaused.
type RunResumed struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Identity says whether the deployment vouches for By.
	Identity
	// Proof is the signed command proof the resume was made with.
	Proof *CommandProof `json:"proof,omitempty"`
}

// EventName returns NameRunPaused, the durable name RunPaused is stored under.
func (RunPaused) EventName() Name { return NameRunPaused }

// SchemaVersion returns 1, the version of RunPaused's encoding (docs/protocol.md).
func (RunPaused) SchemaVersion() int { return 1 }

func (RunPaused) isEvent() {}

// EventName returns NameRunResumed, the durable name RunResumed is stored under.
func (RunResumed) EventName() Name { return NameRunResumed }

// SchemaVersion returns 1, the version of RunResumed's encoding (docs/protocol.md).
func (RunResumed) SchemaVersion() int { return 1 }

func (RunResumed) isEvent() {}
