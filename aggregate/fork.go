package aggregate

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Restart from a step (docs/semantics.md §14,
// docs/adr/0029-restart-from-a-step.md): a finished run is restarted as a
// new run from the state before one of its model turns. ForkOf judges the
// parent's history; the new run records the result (events.RunForked)
// right after its RunStarted and folds only its own log.

// ForkedFrom is the run this run was restarted from (its RunForked), nil
// for a run started fresh.
func (s State) ForkedFrom() *events.ForkedFrom { return s.forked }

// fork folds RunForked: only right after RunStarted. The copied messages
// follow the input and the turns continue the parent's numbering.
func (s *State) fork(name events.Name, e events.RunForked) {
	if s.forked != nil || s.turn != 0 || len(s.transcript) != 1 || len(s.actions) != 0 || e.From.Turn < 1 {
		s.bug(name, "fork at turn %d after the run's first event", e.From.Turn)
	}
	from := e.From
	s.forked = &from
	s.turn = e.From.Turn - 1
	for _, m := range e.Transcript {
		s.transcript = append(s.transcript, entry{msg: cloneMessage(m)})
	}
}

// ForkOf judges a restart of the run whose whole history (oldest first) is
// given, from the state before its model turn turn, and returns the
// parent's RunStarted (its agent and input, which the new run keeps) and
// the RunForked the new run records: the parent's head version, the turn
// and the parent's conversation after its input up to that turn, each tool
// result as the model read it (an open question's final truth, once
// resolved, in place of its unconfirmed note). turn may be the parent's
// last turn + 1: the new run then continues after all of it.
//
// children holds the whole history of every child run a delegation before
// turn started, and of their children (Delegated lists whose to read): a
// child's effects are before the fork point too (docs/semantics.md §1).
//
// Refusals: unknown_run (no history), run_not_finished, invalid_request (a
// child run: restart its root run), wrong_reference (no such turn; a turn
// before a restarted run's own fork point, which its parent holds; actions
// before it that never ran (not_started) or ran with a result no model read
// (faulted); a delegation before it whose child did not complete),
// uncertain_actions (actions before it, or of the children of delegations
// before it, whose outcome nobody knows: uncertain, or an open question;
// Actions names them, a child's as "<child run>/<action>").
func ForkOf(run string, history []events.Recorded, children map[string][]events.Recorded, turn int64) (events.RunStarted, events.RunForked, error) {
	var s State
	cut := -1
	for _, r := range history {
		if mr, ok := r.Event.(events.ModelRequested); ok && mr.Turn == turn && cut < 0 {
			cut = len(s.transcript)
		}
		var err error
		if s, err = EvolveChecked(s, r); err != nil {
			return events.RunStarted{}, events.RunForked{}, err
		}
	}
	if !s.Exists() {
		return events.RunStarted{}, events.RunForked{}, weft.UnknownRun(run)
	}
	if _, done := s.Finished(); !done {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeRunNotFinished, "run %s is %s: only a finished run is restarted (cancel it first)", run, Status(s).Kind)
	}
	if p := s.start.Parent; p != nil {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeInvalidRequest, "run %s is a child run of %s (action %s): restart its root run", run, p.Run, p.Action)
	}
	if turn < 1 || turn > s.turn+1 {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeWrongReference, "run %s has turns 1..%d: restart from one of them, or from %d to continue after the last", run, s.turn, s.turn+1)
	}
	if f := s.forked; f != nil && turn < f.Turn {
		// The turns before a restarted run's fork point are its parent's:
		// its log has neither their requests nor their actions.
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeWrongReference, "run %s starts at turn %d (restarted from %s): restart %s from turn %d", run, f.Turn, f.Run, f.Run, turn)
	}
	if cut < 0 {
		if turn != s.turn+1 {
			return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeInternal, "run %s: no model request of turn %d in its log (turns up to %d)", run, turn, s.turn)
		}
		cut = len(s.transcript)
	}
	var unknown, unran, faulted, unsettled []string
	for _, a := range s.actions {
		switch {
		case a.Turn >= turn:
		case a.State == ActionUncertain || a.OpenQuestion():
			unknown = append(unknown, a.ID)
		case a.Child != nil:
			u, bad, err := judgeChild(a, children)
			if err != nil {
				return events.RunStarted{}, events.RunForked{}, err
			}
			unknown = append(unknown, u...)
			unsettled = append(unsettled, bad...)
		case a.State == ActionFaulted:
			faulted = append(faulted, a.ID)
		case !a.ModelVisible():
			unran = append(unran, a.ID+" ("+string(a.State)+")")
		}
	}
	if len(unknown) > 0 {
		return events.RunStarted{}, events.RunForked{}, &weft.Error{Code: weft.CodeUncertainActions, Actions: unknown,
			Message: fmt.Sprintf("run %s: nobody knows the outcome of %s before turn %d: reconcile them (reconcile_stored) or resolve their open questions first", run, strings.Join(unknown, ", "), turn)}
	}
	if len(unsettled) > 0 {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeWrongReference, "run %s: %s before turn %d did not complete, so no model knows what it did: restart from the turn of that delegation or earlier (it may do it again)", run, strings.Join(unsettled, ", "), turn)
	}
	if len(faulted) > 0 {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeWrongReference, "run %s: %s before turn %d ran (faulted), but its result was over max_result_bytes, so no model has read it: restart from that action's turn or earlier (the effect may happen again)", run, strings.Join(faulted, ", "), turn)
	}
	if len(unran) > 0 {
		return events.RunStarted{}, events.RunForked{}, weft.Errorf(weft.CodeWrongReference, "run %s: %s before turn %d never ran, so the model has no result to read: restart from turn %d or earlier", run, strings.Join(unran, ", "), turn, s.turn)
	}
	msgs := s.render(s.transcript[1:cut], forkContent)
	f := events.RunForked{From: events.ForkedFrom{Run: run, Version: s.version, Turn: turn}, Transcript: make([]events.Message, len(msgs))}
	for i, m := range msgs {
		f.Transcript[i] = cloneMessage(m)
	}
	return s.start, f, nil
}

// judgeChild judges the child run of delegation a for a restart past it:
// unsettled names a when its child did not complete (cancelled, detached,
// failed, or not settled), or a delegation of the child, recursively, whose
// child did not; unknown names the child's actions, and its children's,
// whose outcome nobody knows ("<child run>/<action>").
func judgeChild(a Action, children map[string][]events.Recorded) (unknown, unsettled []string, err error) {
	if a.State != ActionChildSettled || a.Outcome != events.OutcomeCompleted {
		what := a.Outcome
		if a.State != ActionChildSettled {
			what = string(a.State)
		}
		return nil, []string{fmt.Sprintf("%s (child %s: %s)", a.ID, a.Child.Child, what)}, nil
	}
	id := a.Child.Child
	history, ok := children[id]
	if !ok {
		return nil, nil, weft.Errorf(weft.CodeInternal, "child run %s of %s: its log was not read", id, a.ID)
	}
	var c State
	for _, r := range history {
		if c, err = EvolveChecked(c, r); err != nil {
			return nil, nil, err
		}
	}
	for _, ca := range c.actions {
		switch {
		case ca.State == ActionUncertain || ca.OpenQuestion():
			unknown = append(unknown, id+"/"+ca.ID)
		case ca.Child != nil:
			u, bad, err := judgeChild(ca, children)
			if err != nil {
				return nil, nil, err
			}
			unknown = append(unknown, u...)
			for _, b := range bad {
				unsettled = append(unsettled, id+"/"+b)
			}
		}
	}
	return unknown, unsettled, nil
}

// Delegated lists the child runs that delegations of the run whose history
// is given started before turn: the logs ForkOf needs read (of the run, and
// then of each child with turn 0, meaning all its delegations).
func Delegated(history []events.Recorded, turn int64) []string {
	var ids []string
	for _, a := range Fold(history).actions {
		if a.Child != nil && (turn == 0 || a.Turn < turn) {
			ids = append(ids, a.Child.Child)
		}
	}
	return ids
}

// sameForkPoint reports whether a run forked from f (nil: started fresh)
// is what a start with fork would record: same parent and turn (an
// already_started's same_input; docs/semantics.md §14).
func sameForkPoint(f *events.ForkedFrom, fork *events.RunForked) bool {
	if f == nil || fork == nil {
		return f == nil && fork == nil
	}
	return f.Run == fork.From.Run && f.Turn == fork.From.Turn
}

// forkContent is what a restarted run's model reads of action a: what the
// parent's model read, or the final truth of an open question resolved
// since.
func forkContent(a Action) json.RawMessage {
	if a.State == ActionReconciled && a.Resolved != nil {
		return a.Resolved.Content
	}
	return modelContent(a)
}
