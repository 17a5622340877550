package runner

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"

	"github.com/weftrun/weft/worker"
)

// giveTask gives task to the runner's in-process worker at once, beside its
// publish to WEFT_TASKS (dispatch): the body may start without the task's
// delivery by the queue's consumer and the worker's check by direct get
// (worker.HandOff, docs/adr/0027-fewer-writes-per-step.md). The runner
// appended the attempt's fence and holds the run at its version, under the
// run's lock, so the attempt is current (docs/semantics.md §7); the claim
// stays the guard a close races (docs/adr/0023-closing-attempts.md). A task
// prepared while its fence was appended (prepareHandOffs) is given its go
// instead: its claim was sent with the fence. It reports whether the worker
// took the task. fallback publishes the task's stream copy when the
// handed task does not run the attempt to its report (worker.Fallback);
// nil when the copy is published with the hand-off (WithEagerTaskCopy).
func (r *Runner) giveTask(rn *run, task api.Task, hdr nats.Header, fallback worker.Fallback) bool {
	w := r.inproc.Load()
	if w == nil {
		return false
	}
	h := make(nats.Header, len(hdr))
	for k, v := range hdr {
		h[k] = append([]string(nil), v...)
	}
	key := attemptKey(task.Action, task.Attempt, task.Incarnation)
	if p := rn.prepared[key]; p != nil {
		delete(rn.prepared, key)
		if !p.Go(task, h, fallback) {
			// Refused (its worker began stopping): its task removes the
			// claim it took, and a close of the attempt waits for that
			// (rn.aborting), as for an aborted preparation.
			rn.aborted(key, p)
			return false
		}
		return true
	}
	return w.HandOff(task, h, fallback)
}

// prepareHandOffs makes the claims of the attempts fenced in res — the
// resolution of a model reply, about to be appended with it by
// decideAppend — go out while the append is in flight
// (worker.PrepareHandOff, docs/adr/0031-claim-with-the-fence.md): the
// step's two durable writes, the fence and the claim, wait for their
// fsyncs together instead of one after the other. Each body starts only
// after its fence is in the log and the attempt is dispatched (giveTask:
// docs/semantics.md §7). A preparation whose attempt res no longer fences
// (a pass after a conflict decided otherwise) is aborted: its task removes
// the claim it took. One still fenced is kept across passes — the claim
// names the attempt, not the fence's version, and its body waits for
// whichever pass lands.
//
// Only the steady path of a step prepares: a model reply is decided while
// its turn is in flight, so its run is never idle, and a runner that
// comes back with the same id after a crash recovers such a run
// (acquireFromLog) in a new incarnation — the claim keys of fences that
// never landed are not fenced again by another process. Within this
// process a claim an aborted preparation could not remove is taken over by
// its token (worker.wasHanded).
func (r *Runner) prepareHandOffs(rn *run, res []events.Event) {
	w := r.inproc.Load()
	want := map[string]bool{}
	if w != nil {
		ref := rn.state.Started().Agent
		for _, ev := range res {
			f, ok := ev.(events.AttemptFenced)
			if !ok {
				continue
			}
			key := attemptKey(f.Action, f.Attempt, f.Incarnation)
			want[key] = true
			if rn.prepared[key] != nil {
				continue
			}
			p := w.PrepareHandOff(api.Task{
				Schema: api.Schema, Run: rn.id, Action: f.Action, Agent: ref.Name, Version: ref.Version, Tool: f.Tool,
				Attempt: f.Attempt, Incarnation: f.Incarnation, Claim: api.ClaimKey(rn.id, f.Action, f.Attempt, f.Incarnation),
				TimeoutMS: int64(f.Timeout), Deadline: f.Deadline,
			})
			if p == nil {
				continue
			}
			if rn.prepared == nil {
				rn.prepared = map[string]*worker.Prepared{}
			}
			rn.prepared[key] = p
		}
	}
	for key, p := range rn.prepared {
		if !want[key] {
			rn.aborted(key, p)
		}
	}
}

// abortPrepared aborts rn's preparations not given their go: their fences
// were not recorded, or were and were not dispatched by this act (the run
// was dropped, or is to be read again). Their tasks remove the claims they
// took, so that a later dispatch, a close or a takeover meets the attempt
// unclaimed (docs/adr/0031-claim-with-the-fence.md).
//
// It does not wait for those tasks under the run's lock (a stalled claims
// bucket would hold every command and a drain's hand-off of the run
// behind it): the one decision that reads an attempt's claim, a close,
// waits for its attempt's aborted task to end (closeFirst,
// waitAbortedClaim), so that it never reads a claim about to be removed.
func (r *Runner) abortPrepared(rn *run) {
	for key, p := range rn.prepared {
		rn.aborted(key, p)
	}
}

// aborted aborts p, rn's preparation of the attempt of key, and keeps its
// task's end for a close of that attempt to wait for (rn.aborting). Under
// the run's lock.
func (rn *run) aborted(key string, p *worker.Prepared) {
	delete(rn.prepared, key)
	for k, e := range rn.aborting {
		select {
		case <-e:
			delete(rn.aborting, k) // ended: its claim removed, or left to its token
		default:
		}
	}
	if rn.aborting == nil {
		rn.aborting = map[string]<-chan struct{}{}
	}
	rn.aborting[key] = p.Abort()
}

// waitAbortedClaim waits, until ctx ends, for the task of an aborted
// preparation of the attempt of key (abortPrepared) to end — its claim's
// create answered and the claim removed — so that a close of the attempt
// does not find a claim under which no body started. A close that stops
// waiting finds the claim, if still there, and counts the attempt as
// claimed (conservative). Under the run's lock.
func (rn *run) waitAbortedClaim(ctx context.Context, key string) {
	e, ok := rn.aborting[key]
	if !ok {
		return
	}
	select {
	case <-e:
		delete(rn.aborting, key)
	case <-ctx.Done():
	}
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
func (r *Runner) heldHere(rep api.Report) error {
	w := r.inproc.Load()
	if w == nil || rep.Outcome != api.OutcomeLost || rep.Cause != "worker_lost" || rep.Worker == w.ID() {
		return nil
	}
	held, claimed := w.Holds(api.ClaimKey(rep.Run, rep.Action, rep.Attempt, rep.Incarnation))
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
