package runner

import (
	"github.com/nats-io/nats.go"

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

// heldHere reports whether rep is another worker's notice that an attempt
// was lost (worker_lost) while this runner's in-process worker holds it:
// the other worker received the task's stream copy and found the claim
// this runner's worker took for it (a handed task, or a delivery), whose
// body runs or ran here and whose report this worker sends. Such a notice
// is answered without recording anything: recording it would make the
// attempt lost — replayed, or uncertain — while its body runs.
func (r *Runner) heldHere(rep worker.Report) bool {
	w := r.inproc.Load()
	if w == nil || rep.Outcome != worker.OutcomeLost || rep.Cause != "worker_lost" || rep.Worker == w.ID() {
		return false
	}
	return w.Holds(worker.ClaimKey(rep.Run, rep.Action, rep.Attempt, rep.Incarnation))
}
