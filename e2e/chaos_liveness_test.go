package e2e_test

import (
	"fmt"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// notTheCallersFault records a problem when err answers a well-formed
// command of the schedule invalid_request or internal: an internal
// inconsistency told to the caller (SEMANTICS §8, "A run can always be
// answered").
func (c *chaosEnv) notTheCallersFault(what, run string, err error) {
	switch code := weft.ErrorCode(err); code {
	case weft.CodeInvalidRequest, weft.CodeInternal:
		c.problem("%s: %s answered %s (%v): a well-formed command is never the runtime's inconsistency", run, what, code, err)
	}
}

// answerEveryone is the liveness check (SEMANTICS §8, "A run can always be
// answered"): once the chaos stopped and every run settled, every
// unfinished run waits only for a person whose answer is accepted. Each
// pending request is rejected (its current revision: a valid answer) and
// each uncertain action reconciled, again and again as the runs ask, until
// every run finished. An answer is accepted, or refused for its own reason
// that the log then shows (the request was answered meanwhile — expired —
// or the action is no longer uncertain); a refusal the log contradicts,
// invalid_request or internal, or a run that does not finish within the
// deadline though everything it asked was answered, is a problem.
func (c *chaosEnv) answerEveryone() {
	deadline := time.Now().Add(60 * time.Second)
	reported := map[string]bool{}
	for {
		var open []string
		for _, run := range c.runs {
			s, err := c.load(run)
			if err != nil || !s.Exists() {
				continue
			}
			if _, fin := s.Finished(); fin {
				continue
			}
			open = append(open, fmt.Sprintf("%s: %s (actions %s)", run, aggregate.Status(s).Kind, describeActions(s)))
			if aggregate.Status(s).Kind != aggregate.StatusSuspended || reported[run] {
				continue // working: it makes progress on its own
			}
			if a, ok := pendingRequest(s); ok {
				ctx, cancel := c.ctx()
				_, err := c.e.client.Reject(ctx, api.RejectRequest{CommandID: fmt.Sprintf("%s/liveness/%s/%d", run, a.ID, a.Request.Revision), Run: run, Action: a.ID,
					Revision: a.Request.Revision, Approver: "desk", Credential: "chaos", Reason: "liveness"})
				cancel()
				if !c.accepted(run, err, func(s2 aggregate.State) bool { return stillPending(s2, a.ID, a.Request.Revision) }) {
					reported[run] = true
					c.problem("%s: a rejection of %s revision %d, pending before and after, was answered %v", run, a.ID, a.Request.Revision, err)
				}
				continue
			}
			if u := aggregate.Status(s).Uncertain; len(u) > 0 {
				ctx, cancel := c.ctx()
				_, err := c.e.client.Reconcile(ctx, api.ReconcileRequest{CommandID: fmt.Sprintf("%s/liveness/%s", run, u[0]), Run: run, Action: u[0], Content: []byte(`{"done":"by hand"}`), By: "chaos"})
				cancel()
				if !c.accepted(run, err, func(s2 aggregate.State) bool {
					act, ok := s2.Action(u[0])
					return ok && act.State == aggregate.ActionUncertain
				}) {
					reported[run] = true
					c.problem("%s: a reconciliation of %s, uncertain before and after, was answered %v", run, u[0], err)
				}
			}
		}
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, o := range open {
				c.problem("run never finished though every question it asked was answered: %s", o)
			}
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// accepted judges a person's answer err to run: nil, a transient answer
// (sent again on the next round), or a definite refusal the log confirms:
// still (the question is still open) is false once the log is re-read.
// invalid_request and internal are never accepted.
func (c *chaosEnv) accepted(run string, err error, still func(aggregate.State) bool) bool {
	switch weft.ErrorCode(err) {
	case "":
		return true
	case weft.CodeInvalidRequest, weft.CodeInternal:
		return false
	case weft.CodeRunnerBusy, weft.CodeUnavailable, weft.CodeContended, weft.CodeConflict, weft.CodeOutcomeUnknown:
		return true
	}
	s2, lerr := c.load(run)
	return lerr != nil || !still(s2)
}
