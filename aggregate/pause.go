package aggregate

import (
	"github.com/weftrun/weft/events"
)

// Pause pauses the run (docs/semantics.md §13): until Resume it starts no
// model call, no tool body and no child run. Work in flight finishes and is recorded;
// approvals and reconciliations are still decided, and what they unlock
// starts on resume; recorded deadlines keep running. On a finished run, or
// one being cancelled, it is refused run_ended; on a paused run it records
// nothing (a repeat is answered with the run's status).
type Pause struct {
	By     string
	Reason string
	// Identity and Proof are recorded as given, as for Cancel.
	Identity events.Identity
	Proof    *events.CommandProof
}

// Resume resumes a paused run: what its state calls for starts in the same
// decision (fences for free slots, the child runs of delegations allowed
// while paused, the next model turn, the correction of a typed answer
// rejected while paused, a due retry). On a
// finished run, or one being cancelled, it is refused run_ended; on a run
// that is not paused it records nothing.
type Resume struct {
	By     string
	Reason string
	// Identity and Proof are recorded as given, as for Cancel.
	Identity events.Identity
	Proof    *events.CommandProof
}

// CommandName returns "pause".
func (Pause) CommandName() string { return "pause" }

// CommandName returns "resume".
func (Resume) CommandName() string { return "resume" }

func (Pause) isCommand()  {}
func (Resume) isCommand() {}

// Paused reports whether the run is paused (RunPaused without a later
// RunResumed).
func (s State) Paused() bool { return s.paused }

func (d *decider) pause(c Pause) error {
	if d.s.finished || d.s.cancelling {
		return d.endedOrCancelling()
	}
	if !d.s.paused {
		d.emit(events.RunPaused{By: c.By, Reason: c.Reason, Identity: c.Identity, Proof: c.Proof})
	}
	return nil
}

func (d *decider) resume(c Resume) error {
	if d.s.finished || d.s.cancelling {
		return d.endedOrCancelling()
	}
	if d.s.paused {
		d.emit(events.RunResumed{By: c.By, Reason: c.Reason, Identity: c.Identity, Proof: c.Proof})
	}
	return nil
}

// correctionDue reports whether a rejected typed answer waits for its
// correction turn: the transcript ends with the correction an
// answer_rejected added (the only user message after the input) and no
// turn was requested or is waiting for its retry since. It is derived from
// the recorded events, so that a run paused when its answer was rejected
// has the turn requested by its resume (docs/semantics.md §13), also after
// a takeover or from a snapshot.
func (s *State) correctionDue() bool {
	n := len(s.transcript)
	return n > 1 && !s.modelPending && s.retryAt == nil &&
		s.transcript[n-1].batch == 0 && s.transcript[n-1].msg.Role == events.RoleUser
}

// pausedWork is w as a paused run's Pending gives it (docs/semantics.md
// §13): a requested turn is only recorded if its reply already arrived
// (RecordOnly, as a draining runner's). Everything else stands: the calls
// of a reply recorded while paused are still resolved (validation and
// policy start no body; approvals it asks can be answered while paused);
// Dispatch lists only attempts fenced before the pause (advance fences
// nothing while paused), work in flight decided before it; timers keep
// their recorded times (a model retry's fires, and the retry waits for the
// resume).
func pausedWork(w Work) Work {
	if w.Model != nil {
		m := *w.Model
		m.RecordOnly = true
		w.Model = &m
	}
	return w
}

// PausedStatus is the status rule of docs/semantics.md §13 over a status
// kind computed by RunStatusOf: a paused run that is neither finished nor
// being cancelled is listed paused, whatever is in flight.
func PausedStatus(k StatusKind, paused, cancelling bool) StatusKind {
	if paused && !cancelling && k != StatusFinished {
		return StatusPaused
	}
	return k
}
