package runner

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"

	"github.com/weftrun/weft/worker"
)

// giveTask gives task to the runner's in-process worker at once, beside its
// publish to WEFT_TASKS (dispatch): the body may start without the task's
// delivery by the queue's consumer and the worker's check by direct get
// (worker.HandOff, docs/adr/0027-fewer-writes-per-step.md). The runner
// appended the attempt's fence and holds the run at its version, under the
// run's lock, so the attempt is current (docs/semantics.md §7); the claim
// stays the guard a close races (docs/adr/0023-closing-attempts.md). It
// reports whether the worker took the task.
func (r *Runner) giveTask(task worker.Task, hdr nats.Header) bool {
	w := r.inproc.Load()
	if w == nil {
		return false
	}
	h := make(nats.Header, len(hdr))
	for k, v := range hdr {
		h[k] = append([]string(nil), v...)
	}
	return w.HandOff(task, h)
}

// heldHere refuses rep, another worker's notice that an attempt was lost
// (worker_lost), while this runner's in-process worker holds the attempt:
// the other worker received the task's stream copy and found a claim —
// the one this runner's worker took (a handed task, or a delivery), whose
// body runs or ran here and whose report this worker sends, or another
// one that this worker's holder is about to find too. The refusal is
// runner_busy, not applied and retryable (docs/protocol.md): the other
// worker keeps its copy and tries again. Once the holder reported, the
// retry is stale (refused, or dropped by the worker's own check); if the
// holder ended without the claim (claimed by a worker that vanished,
// closed, not current), the retry is recorded. Recording the notice while
// the holder runs the body would make the attempt lost — replayed, or
// uncertain — while its body runs; answering it without recording would
// drop the only report of an attempt nobody here runs, and strand its run
// (docs/semantics.md §8). A notice of this runner's own worker (Abandon)
// is never refused here.
func (r *Runner) heldHere(rep worker.Report) error {
	w := r.inproc.Load()
	if w == nil || rep.Outcome != worker.OutcomeLost || rep.Cause != "worker_lost" || rep.Worker == w.ID() {
		return nil
	}
	held, claimed := w.Holds(worker.ClaimKey(rep.Run, rep.Action, rep.Attempt, rep.Incarnation))
	if !held {
		return nil
	}
	doing := "which is checking and claiming it"
	if claimed {
		doing = "which claimed it"
	}
	return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: attempt %d of action %s is held by runner %s's own worker, %s; retry",
		rep.Run, rep.Attempt, rep.Action, r.id, doing)}
}
