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
// By is who paused it, Reason why (both as given, like CancelRequested).
type RunPaused struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RunResumed is emitted when a person resumes a paused run: what the run's
// state calls for is started again in the same decision (fences, the next
// model turn). By and Reason as for RunPaused.
type RunResumed struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
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
