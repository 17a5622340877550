package e2e_test

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// notTheCallersFault records a problem when err answers a well-formed
// command of the schedule invalid_request or internal: an internal
// inconsistency told to the caller (docs/semantics.md §8, "A run can always be
// answered").
//
// A command that got no answer (the caller's deadline ended while a runner
// was killed or took over) was not answered internal: api.Client returns
// the transport's error, which weft.ErrorCode would call internal, so only
// answers are judged here (the chaos package's "transport" class).
func (c *chaosEnv) notTheCallersFault(what, run string, err error) {
	if !answered(err) {
		return
	}
	switch code := weft.ErrorCode(err); code {
	case weft.CodeInvalidRequest, weft.CodeInternal:
		c.problem("%s: %s answered %s (%v): a well-formed command is never the runtime's inconsistency", run, what, code, err)
	}
}

// answerEveryone is the liveness check (docs/semantics.md §8, "A run can always
// be
// answered"): once the chaos stopped and every run settled, every
// unfinished run waits only for a person whose answer is accepted. First
// two more runs of version 2 ask for an approval (a payment of 500) and
// wait for it; then every runner is replaced (SIGKILL, then a new process
// under a new id), one at a time, and the check waits past version 2's
// 4 s approval expiry: every suspended run is then driven by a runner
// that is gone, its partition owned by another, and its expiry due — the
// chaos run that stranded runs (a takeover with cause idle refused once
// the expiry was applied first; the expiry timer acknowledged away). Then
// each
// pending request is rejected (its current revision: a valid answer) and
// each uncertain action reconciled, again and again as the runs ask, until
// every run finished. An answer is accepted, or refused for its own reason
// that the log then shows (the request was answered meanwhile — expired —
// or the action is no longer uncertain); a refusal the log contradicts,
// invalid_request or internal, or a run that does not finish within the
// deadline though everything it asked was answered, is a problem.
func (c *chaosEnv) answerEveryone() {
	in := chaosInput{Turns: [][]chaosCall{{{Tool: "pay", Args: chaosIn{Amount: 500}}}}}
	var asking []string
	for i := range 2 {
		run := fmt.Sprintf("c%d-live-%d", c.seed, i)
		for until := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			ctx, cancel := c.ctx()
			_, err := c.e.client.Start(ctx, api.StartRequest{CommandID: run, Run: run, Agent: "chaos", Version: "2", Input: in.String()})
			cancel()
			c.note("liveness: start %s: %v", run, err)
			if code := weft.ErrorCode(err); code == "" || code == weft.CodeAlreadyStarted || time.Now().After(until) {
				break
			}
		}
		c.runs = append(c.runs, run)
		asking = append(asking, run)
	}
	for until := time.Now().Add(10 * time.Second); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		waiting := 0
		for _, run := range asking {
			if s, err := c.load(run); err == nil {
				if _, ok := pendingRequest(s); ok {
					waiting++
				}
			}
		}
		if waiting == len(asking) {
			break
		}
	}
	pending := 0
	for _, run := range c.runs {
		if s, err := c.load(run); err == nil {
			if _, ok := pendingRequest(s); ok {
				pending++
			}
		}
	}
	c.t.Logf("seed %d: liveness: %d runs wait for an approval when every runner is replaced", c.seed, pending)
	for i, s := range c.slots {
		if s.worker {
			continue
		}
		c.mu.Lock()
		alive := s.state == "alive"
		c.mu.Unlock()
		if alive {
			c.markDown(s.id, time.Now())
			c.setState(s, "dead")
			_ = s.p.cmd.Process.Signal(syscall.SIGKILL)
			c.note("liveness: SIGKILL %s", s.id)
		}
		c.spawn(i)
	}
	time.Sleep(max(5*time.Second, 2*lease)) // past version 2's 4 s expiry, partitions claimed again
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
//
// A command that got no answer is transient too: it is sent again on the
// next round, and a run that never finishes is the problem the caller
// reports.
func (c *chaosEnv) accepted(run string, err error, still func(aggregate.State) bool) bool {
	if err != nil && !answered(err) {
		return true
	}
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

// answered reports whether err is a command API answer (a *weft.Error the
// runtime sent), not a command that got no answer.
func answered(err error) bool {
	var we *weft.Error
	return errors.As(err, &we)
}
