package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// checkNotAnswerable is the check that a run can always be answered
// (docs/semantics.md §8): no well-formed command of the workload was answered
// invalid_request or internal (an internal refusal: the runtime's own
// inconsistency told to the caller), and once the workload is done every
// run that did not finish still answers a command for the command's own
// reason, not the runtime's.
const checkNotAnswerable = "run_not_answerable"

// answerableGrace bounds how long an unfinished run's probe is sent again
// while its answers say "retry" (runner_busy, unavailable, ...).
const answerableGrace = 30 * time.Second

// checkAnswerable runs once the workload is done and before the runners
// stop. Every command the workload sent is well formed: an answer
// invalid_request or internal is a violation. Then every run the workload
// started and that did not finish gets a probe: an approval of a revision
// no request of the run ever had — of its first pending request (answered
// stale_reference) or, with none pending, of an action the run does not
// have (wrong_reference). It is decided like any answer, through the
// takeover of a run whose driver is gone, and records nothing. Any other
// answer, or none but "retry" within answerableGrace, is a violation
// naming the run, its status and the answer.
func (h *harness) checkAnswerable(ctx context.Context, w *workload) {
	h.mu.Lock()
	cmds := slices.Clone(h.cmds)
	h.mu.Unlock()
	for _, c := range cmds {
		switch weft.Code(c.code) {
		case weft.CodeInvalidRequest, weft.CodeInternal:
			h.violate(Violation{Check: checkNotAnswerable, Run: c.run, Action: c.action,
				Detail: fmt.Sprintf("%s %s (revision %d) was answered %s: %s", c.kind, c.id, c.rev, c.code, c.msg)})
		}
	}
	w.mu.Lock()
	var runs []string
	for _, p := range w.plans {
		if w.started[p.id] {
			runs = append(runs, p.id)
		}
	}
	w.mu.Unlock()
	for _, run := range runs {
		if ctx.Err() != nil {
			return
		}
		s, err := h.fold(ctx, run)
		if err != nil {
			h.violate(Violation{Check: checkNotAnswerable, Run: run, Detail: fmt.Sprintf("cannot read the run: %v", err)})
			continue
		}
		if _, fin := s.Finished(); fin || !s.Exists() {
			continue
		}
		h.probe(ctx, run, s)
	}
}

// probe sends run, unfinished in state s, an approval that must be refused
// for its own reason, and reports a violation otherwise.
func (h *harness) probe(ctx context.Context, run string, s aggregate.State) {
	st := aggregate.Status(s)
	action, rev, want := "0/probe", 1, weft.CodeWrongReference
	if len(st.Approvals) > 0 {
		a, _ := s.Action(st.Approvals[0])
		action, rev, want = a.ID, a.Request.Revision+1000, weft.CodeStaleReference
	}
	deadline := time.Now().Add(answerableGrace)
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := h.client.Approve(cctx, api.ApproveRequest{CommandID: fmt.Sprintf("probe-%s-%d", run, try), Run: run, Action: action, Revision: rev, Approver: "desk", Credential: "approver-0"})
		cancel()
		var we *weft.Error
		code := weft.Code("transport")
		if errors.As(err, &we) {
			code = we.Code
		}
		switch {
		case err == nil:
			h.violate(Violation{Check: checkNotAnswerable, Run: run, Action: action,
				Detail: fmt.Sprintf("status %s: an approval of revision %d, which no request had, was accepted", st.Kind, rev)})
			return
		case code == want:
			return
		}
		if code == "transport" || code == weft.CodeOutcomeUnknown || code.Retryable() {
			if time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
				continue
			}
		}
		h.violate(Violation{Check: checkNotAnswerable, Run: run, Action: action,
			Detail: fmt.Sprintf("status %s (approvals %v, uncertain %v): an approval of revision %d was answered %v, want %s", st.Kind, st.Approvals, st.Uncertain, rev, err, want)})
		return
	}
}
