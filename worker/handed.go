package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/backoff"
)

// HandOff gives t, a task its runner publishes to WEFT_TASKS at the same
// time (eager) or only through fallback (below), to this in-process
// worker directly: the attempt's body may start
// without waiting for the task's publish, its delivery by the queue's
// consumer and the check by direct get (docs/adr/0027-fewer-writes-per-step.md).
// hdr are the task message's headers (its trace context).
//
// The caller is the runner that appended t's fence and holds its run at
// the fence's version: the attempt is current when HandOff is called
// (docs/semantics.md §7: the fence is recorded before any body starts), so
// the check before the claim is skipped when it is the default LogCheck
// (an embedder's own AttemptCheck is still asked, before and after the
// claim, as for a delivered task). The claim is not skipped: it is the
// durable, create-only key a runner's close races (docs/adr/0023), so a
// close that wins before it means the body never starts (§5), and a close
// that comes after it finds it claimed and stops the body
// (weft.stop.<run>, tracked from before the claim).
//
// The task's stream copy is never run a second time: its delivery to this
// worker while the handed task is held waits for it and ends as it does
// (acked once the report was answered); a delivery anywhere after the
// claim finds the claim (or, once reported, the attempt no longer current)
// and never starts the body; another Go worker delays the copy's first
// delivery (HeaderHandedTo). Whoever claims first runs the body; the
// handed task that finds the attempt claimed (by its stream copy's
// delivery, or a worker that vanished) or closed does nothing more — it
// has no message to ack, and the copy's delivery reports. A handed task
// that did not start the body after taking its claim, or whose claim's
// create had no answer, removes that claim (dropUnstarted), so that the
// copy's delivery runs the body as a first delivery instead of reporting
// the attempt lost for a body that never started.
//
// HandOff reports whether the worker took t: false when it serves no
// queue of t's identity, is not running yet or is stopping, or, with a
// fallback, when the attempt is held here already (the stream copy is
// then the only way the task is run).
//
// fallback, when not nil, publishes the task's stream copy: the runner
// did not publish it beside the hand-off (the lazy copy,
// docs/adr/0039-the-stream-copy-only-when-needed.md). The handed task
// calls it once, after its hold ended, when it ends without its report
// answered or its attempt settled here (Fallback). A nil fallback means
// the copy was published with the hand-off (eager).
func (w *Worker) HandOff(t api.Task, hdr nats.Header, fallback Fallback) bool {
	q := api.Queue{Agent: t.Agent, Version: t.Version, Tool: t.Tool}
	h, ok := w.handlers[q]
	if !ok || !w.ready.Load() {
		return false
	}
	key := api.ClaimKey(t.Run, t.Action, t.Attempt, t.Incarnation)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping.Load() || w.abandoned {
		return false
	}
	if _, busy := w.held[key]; busy {
		if fallback != nil {
			// The holder may end without running the attempt and has no
			// fallback of this dispatch: an aborted preparation of the
			// same attempt (its fence's append had no answer, and the
			// read-back found it recorded) still removing its claim ends
			// with no body, no report and no copy. Not taken: the runner
			// publishes the copy itself, whose delivery here waits for
			// the hold (elsewhere, another worker's loss notice is
			// refused while it is held: runner_busy), as with the copy
			// published with the hand-off.
			return false
		}
		// The copy was published with the hand-off (eager): a delivery
		// of it (or an earlier hand-off) holds the attempt and does the
		// work, or the copy's next delivery does.
		w.handedOff.Add(1)
		return true
	}
	w.handedOff.Add(1)
	// The attempt is held from now on, before HandOff returns — as
	// PrepareHandOff holds it — so that the runner refuses another
	// worker's loss notice of it (Holds) from the moment it is handed
	// off: a notice applied before the hold would record the attempt lost
	// while this task goes on to take the claim over by an orphan token
	// and start its body.
	hd := &held{done: make(chan struct{})}
	w.held[key] = hd
	w.group.Go(func() error {
		w.handedTask(q, h, t, hdr, key, hd, nil, fallback)
		return nil
	})
	return true
}

// HeaderHandedTo is set by a runner on the stream copy of a task it also
// handed to its in-process worker (HandOff) when it publishes that copy
// with the hand-off (runner.WithEagerTaskCopy; a copy a handed task
// publishes through its Fallback does not carry it): the worker's id (the
// runner's). Another Go worker that receives the copy at its first
// delivery gives it back with a delay (HandedCopyDelay) instead of
// checking, claiming and reporting at once: by then the handed task has
// usually reported, and the delivery after the delay finds the attempt no
// longer current and acks it. Later deliveries are handled as any
// delivery is (the copy stays the fallback: docs/adr/0027,
// docs/protocol/41-tasks.md). A requeued copy does not carry it.
const HeaderHandedTo = "Weft-Handed-To"

// HandedCopyDelay is the default delay of a handed task's stream copy at
// its first delivery to a worker it was not handed to (HeaderHandedTo,
// WithHandedCopyDelay).
const HandedCopyDelay = 2 * time.Second

// delayHandedCopy reports whether m, a delivery of a task, is the stream
// copy of a task another worker was handed, at its first delivery here: it
// is then given back with w.copyDelay, not handled now.
func (w *Worker) delayHandedCopy(m jetstream.Msg) bool {
	by := m.Headers().Get(HeaderHandedTo)
	if by == "" || by == w.id || w.copyDelay <= 0 {
		return false
	}
	md, err := m.Metadata()
	if err != nil || md.NumDelivered != 1 {
		return false
	}
	_ = m.NakWithDelay(w.copyDelay)
	return true
}

// HandedOff is how many tasks HandOff took.
func (w *Worker) HandedOff() int64 { return w.handedOff.Load() }

// HandedFallbacks is how many handed tasks called their Fallback: ended
// here without their report answered, so that their stream copy was
// published then.
func (w *Worker) HandedFallbacks() int64 { return w.handedFallbacks.Load() }

// Holds reports whether this worker holds the attempt of claim key (held:
// a delivery or a handed task of it is being checked, claimed, run or
// reported here) and whether that holder took the attempt's claim
// (claimed). Its runner refuses, runner_busy, another worker's report that
// this attempt was lost while it is held: the holder either runs the body
// and reports (the notice is then stale), or ends without the claim, and
// the notice's retry is recorded (runner.Report, docs/adr/0027).
func (w *Worker) Holds(key string) (held, claimed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.held[key]
	return ok, ok && h.claimed
}

// claimedHeld marks h, this worker's hold of an attempt, as the one that
// took its claim.
func (w *Worker) claimedHeld(h *held) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.claimed = true
}

// handedTask runs a handed task — handle's steps without the message
// (nothing to ack, requeue or give back) and, with the default check,
// without the check before the claim and the read after it — once the
// attempt of key is held here (held): for a
// task given by HandOff (p nil), or prepared by PrepareHandOff while its
// fence is appended (p), whose claim is taken before the fence is
// recorded and whose body waits for p's Go.
func (w *Worker) handedTask(q api.Queue, h Handler, t api.Task, hdr nats.Header, key string, held *held, p *Prepared, fallback Fallback) {
	// A delivery of the stream copy that waits for this hold ends as it
	// does: acked once the report was answered, else given back (its
	// redelivery decides from the claim, as any delivery does).
	acked := false
	defer func() {
		if acked || held.unstarted != "" {
			w.doneHanded(key, held.unstarted)
		}
		w.leave(key, held, acked)
		if !acked && fallback != nil {
			// Not run here to its report: the stream copy, which the
			// runner did not publish with the hand-off, runs the attempt
			// (a first delivery: the claim was removed), takes over the
			// claim left unstarted, or finds the attempt claimed, closed
			// or no longer current and reports or acks as any delivery
			// does (docs/semantics.md §8: never dropped). After leave,
			// so that its delivery here does not wait for this hold.
			// A claim left unstarted is named to the copy's delivery
			// elsewhere (api.HeaderUnstartedClaim), as a requeue does;
			// the publish is cut short LateAfterAbandon after Abandon.
			w.handedFallbacks.Add(1)
			fallback(w.late, held.unstarted)
		}
		if p != nil {
			close(p.ended)
		}
	}()
	wq := q
	rep := api.Report{Schema: api.Schema, Run: t.Run, Action: t.Action, Attempt: t.Attempt, Incarnation: t.Incarnation, Worker: w.id, Queue: &wq}
	rep.CommandID = fmt.Sprintf("report/%s/%s/%d/%d", t.Run, t.Action, t.Attempt, t.Incarnation)
	var ctx context.Context
	if p == nil {
		base := context.Background()
		if w.ctxFrom != nil {
			base = w.ctxFrom(base, hdr)
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(base)
		defer cancel(nil)
		// Stoppable from before the claim: a stop recorded after the claim
		// reaches the body (or keeps it from starting, below).
		w.track(key, t.Run, cancel)
		defer w.untrack(key)
		if t.Deadline != nil && !time.Now().Before(*t.Deadline) {
			return // the stream copy's delivery reports it timed_out
		}
		if !w.defaultCheck {
			switch w.current(t) {
			case attemptStale:
				// No longer current: a delivery of the copy would ack it
				// unstarted, so none is published.
				acked = true
				return
			case attemptUnknown:
				return // the stream copy's delivery decides, as for any delivery
			}
		}
	}
	// A claim of this key that an earlier handed task took without
	// starting the body and could not remove (dropUnstarted) is taken over
	// by its token, as a requeued task's delivery does.
	var orphans []string
	if _, tok := w.wasHanded(key); tok != "" {
		orphans = []string{tok}
	}
	res, own, found := w.takeClaim(t, key, orphans)
	if p != nil {
		// The claim's create went out while the fence was appended; the
		// body waits for the runner's word that the fence is recorded
		// (docs/semantics.md §7), and never starts without it.
		g := p.wait()
		if !g.ok {
			if res != claimHeld {
				// The fence was not recorded (or not here: the runner
				// dropped the run, the worker stops): a claim no body
				// started under must not make the attempt look claimed.
				w.dropUnstarted(t, &own, held)
			}
			return
		}
		t, ctx = g.t, g.ctx // the task as recorded and dispatched
		fallback = g.fallback
		defer g.cancel(nil)
		defer w.untrack(key) // tracked by Go
	}
	if res == claimUnknown {
		// The create may have landed unanswered: a claim no body started
		// under, which the copy's delivery would report worker_lost.
		w.dropUnstarted(t, &own, held)
		return
	}
	if res != claimTaken {
		// Closed: the body never starts, and the close records the
		// attempt's end (docs/adr/0023); a delivery of the copy would
		// ack it, so none is published. Or claimed by the stream copy's
		// delivery (it runs and reports) or by a worker that vanished
		// (the copy's delivery reports it lost).
		acked = found.Closed != nil
		return
	}
	w.claimedHeld(held)
	// A path below that ends the attempt without its body (ended, stopped,
	// deadline) marks the claim not started first, as a delivery does
	// (worker.go; docs/adr/0023, "Claims released as not started"); a
	// worker stopping before the start removes its claim instead
	// (dropUnstarted), so that the copy runs the body.
	if !w.defaultCheck && w.current(t) == attemptStale {
		if w.markNotStarted(t, &own, api.ClaimEnded) {
			w.reportNotStarted(t, rep, api.ClaimEnded)
		}
		acked = true // ended while it was claimed: only the mark is reported
		return
	}
	if context.Cause(ctx) == errStopped {
		if w.markNotStarted(t, &own, api.ClaimStopped) {
			w.reportNotStarted(t, rep, api.ClaimStopped)
		}
		acked = true // stopped by a recorded decision: only the mark is reported
		return
	}
	if t.Deadline != nil && !time.Now().Before(*t.Deadline) {
		w.markNotStarted(t, &own, api.ClaimDeadline)
		rep.Outcome, rep.Cause = api.OutcomeLost, "timed_out"
		rep.Evidence = "the deadline passed before the body started; the body was not started"
		acked = w.deliver(t, rep, &own)
		return
	}
	if !w.startBody() {
		// Stopped or abandoned since HandOff: the body never started, so
		// the claim is removed and the stream copy's delivery (here or
		// in another worker) runs it as a first delivery.
		w.dropUnstarted(t, &own, held)
		return
	}
	rep = w.run(ctx, h, t, rep, &own)
	acked = w.deliver(t, rep, &own)
}

// Prepared is a task handed to the in-process worker before its fence is
// recorded (PrepareHandOff): its claim's create is sent while the runner
// appends the fence, so that the two durable writes of a step wait for one
// another's fsync instead of following each other
// (docs/adr/0031-claim-with-the-fence.md). Its body starts only after Go,
// which the runner calls once the fence is in the log (acknowledged, or
// read back after an append whose outcome was unknown) and the attempt is
// dispatched (docs/semantics.md §7), and after the claim was won. Abort
// (the fence was not recorded, or not dispatched here) makes the task
// remove the claim it took (dropUnstarted), so that no later attempt
// under the same key, and no close, finds a claim no body started under.
type Prepared struct {
	w    *Worker
	key  string
	gate chan handedGo // one Go or Abort (capacity 1)
	// told: Go or Abort was given, or the worker stopped first (w.mu).
	told bool
	// ended is closed when the task ended: after its body and report, or,
	// when it did not start, once the claim it took was removed or its
	// token kept (dropUnstarted).
	ended chan struct{}
}

// handedGo is a Prepared task's word from its runner: ok with the task as
// dispatched and its body's context (tracked for stops by Go), or not ok.
type handedGo struct {
	t        api.Task
	ctx      context.Context
	cancel   context.CancelCauseFunc
	ok       bool
	fallback Fallback
}

// Fallback publishes the stream copy of a handed task that its runner did
// not publish with the hand-off (HandOff, Prepared.Go). The handed task calls it when it ends without
// its report answered — its body not started (its claim's outcome unknown
// and dropped, the worker stopping, a deadline or an unanswered check
// before the start, the attempt claimed by another), or its report not
// delivered; not when the claim was closed or the attempt is no longer
// current (a delivery of the copy would only ack it) — after it
// removed the claim it took without starting the body, or kept its token
// (dropUnstarted), and after its hold ended. It is called from the task's
// goroutine, which the worker's stop waits for, so a worker that stops
// has published the copies of its unstarted handed tasks when Run
// returns. It must not block for long (a bounded publish).
//
// ctx ends LateAfterAbandon after the worker's Abandon: the publish is
// bounded by it, so that an abandoned worker's tasks do not outlive its
// embedder's connection by much. unstarted, when not empty, is the token
// of the claim the task took, or may have taken, without starting the
// body and could not remove (dropUnstarted): the copy carries it as
// api.HeaderUnstartedClaim, so that its delivery in any worker takes that
// claim over, as a requeued task's does, instead of reporting the attempt
// lost for a body that never started.
type Fallback func(ctx context.Context, unstarted string)

// PrepareHandOff takes t — a task whose fence its runner is appending
// now, with the identity, attempt, incarnation and deadline of that fence
// — and creates its claim at once, in this worker. The body waits for the
// returned Prepared's Go. It returns nil when HandOff would not take the
// task (a queue this worker does not serve, not running yet or stopping)
// or when the attempt is held here already; the runner then hands the
// task off (or not) when it dispatches it, as before.
//
// Only with the default check (LogCheck), which a handed task skips: an
// embedder's own AttemptCheck is asked before the claim, as for a
// delivered task (docs/adr/0027), and that cannot be before the fence is
// recorded — such a worker's tasks are handed off at dispatch (nil).
func (w *Worker) PrepareHandOff(t api.Task) *Prepared {
	q := api.Queue{Agent: t.Agent, Version: t.Version, Tool: t.Tool}
	h, ok := w.handlers[q]
	if !ok || !w.ready.Load() || !w.defaultCheck {
		return nil
	}
	key := api.ClaimKey(t.Run, t.Action, t.Attempt, t.Incarnation)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping.Load() || w.abandoned {
		return nil
	}
	if _, busy := w.held[key]; busy {
		return nil
	}
	hd := &held{done: make(chan struct{})}
	w.held[key] = hd
	p := &Prepared{w: w, key: key, gate: make(chan handedGo, 1), ended: make(chan struct{})}
	w.group.Go(func() error {
		w.handedTask(q, h, t, nil, key, hd, p, nil)
		return nil
	})
	return p
}

// Go gives p its task as dispatched (t, with the fence's version; hdr the
// task message's headers): the fence is in the log. The attempt is
// stoppable from now on (weft.stop.<run>). It reports whether p takes it:
// false when p was aborted, or its worker began stopping before (the
// stream copy is then the only way the task is run). fallback is as for
// HandOff.
func (p *Prepared) Go(t api.Task, hdr nats.Header, fallback Fallback) bool {
	w := p.w
	base := context.Background()
	if w.ctxFrom != nil {
		base = w.ctxFrom(base, hdr)
	}
	ctx, cancel := context.WithCancelCause(base)
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.told {
		cancel(nil)
		return false
	}
	if w.stopping.Load() || w.abandoned {
		// As HandOff refuses then: no body starts in a worker that stops,
		// and the runner publishes the copy without naming this worker
		// (docs/adr/0031-claim-with-the-fence.md). The task removes its
		// claim.
		p.told = true
		p.gate <- handedGo{}
		cancel(nil)
		return false
	}
	p.told = true
	w.running[p.key] = &running{run: t.Run, cancel: cancel} // track
	w.handedOff.Add(1)
	p.gate <- handedGo{t: t, ctx: ctx, cancel: cancel, ok: true, fallback: fallback}
	return true
}

// Abort tells p its body must not start: its fence was not recorded, or
// its runner does not dispatch it. The task removes the claim it took
// (once its create was answered). Nothing once Go was given. The channel
// returned is closed when the task ended: the runner waits for it before
// anything else decides about the attempt, so that a close never races
// the removal of a claim no body started under.
func (p *Prepared) Abort() <-chan struct{} {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if !p.told {
		p.told = true
		p.gate <- handedGo{}
	}
	return p.ended
}

// wait waits for p's Go or Abort; a worker that stops first ends p (not
// ok), as no body starts any more.
func (p *Prepared) wait() handedGo {
	select {
	case g := <-p.gate:
		return g
	case <-p.w.stopped.Done():
	}
	p.w.mu.Lock()
	if !p.told {
		p.told = true
		p.w.mu.Unlock()
		return handedGo{}
	}
	p.w.mu.Unlock()
	return <-p.gate
}

// dropUnstarted removes own, the claim a handed task took, or may have
// taken unanswered, without starting t's body: the task has no message to
// requeue with the claim's token (api.HeaderUnstartedClaim, as a delivery
// does), so its stream copy's delivery would find a token it does not know
// and report the attempt worker_lost — uncertain for a body that provably
// never started. The claim is read and deleted at its revision if it holds
// own's token (a claim of another token, or none, is left as it is),
// tried as takeClaim tries (within LateAfterAbandon after Abandon), while
// the task still holds the attempt: another worker's notice meanwhile is
// refused runner_busy, and a delivery of the copy in this worker waits. If
// the claim cannot be removed, that delivery requeues the copy naming the
// token (h.unstarted), as a delivered task's requeue does; a copy another
// worker receives then reports the attempt lost, as a delivery whose
// requeue could not be published does (conservative: nothing started).
func (w *Worker) dropUnstarted(t api.Task, own *ownClaim, h *held) {
	back := backoff.New(50*time.Millisecond, 2*time.Second)
	for range 6 {
		ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
		e, err := w.claims.Get(ctx, own.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			cancel()
			return // never landed, or deleted
		case err == nil && decodeClaim(e.Value()).Token != own.val.Token:
			cancel()
			return // another's claim: it decides, as for any delivery
		case err == nil:
			err = w.claims.Delete(ctx, own.key, jetstream.LastRevision(e.Revision()))
			if err == nil {
				cancel()
				return
			}
		}
		cancel()
		w.log.Warn("worker: cannot remove the claim of a handed task whose body did not start", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "key", own.key, "err", err)
		if back.Wait(w.late) != nil {
			break
		}
	}
	w.mu.Lock()
	h.unstarted = own.val.Token
	w.mu.Unlock()
}

// handedKeep is how long, at least, the claim key of a handed task that is
// done is remembered for its stream copy (wasHanded): longer than the
// copy's publish and delivery take. Keys live in two generations, the
// current one and the one before, each handedKeep long.
const handedKeep = time.Minute

// doneHanded remembers key, a handed task whose report was answered or
// that needs none (unstarted ""), or that did not start the body and left
// a claim of token unstarted it could not remove (dropUnstarted).
func (w *Worker) doneHanded(key, unstarted string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.handedSince) > handedKeep {
		w.handedPrev, w.handedDone, w.handedSince = w.handedDone, map[string]string{}, now
	}
	w.handedDone[key] = unstarted
}

// wasHanded reports whether key is a handed task this worker did
// (doneHanded) and the token of the claim it left unstarted, if any: a
// delivery of its stream copy is acked and never started — or, with a
// token, takes that claim over as a requeued task's delivery does
// (api.HeaderUnstartedClaim).
func (w *Worker) wasHanded(key string) (done bool, unstarted string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tok, ok := w.handedDone[key]
	if !ok {
		tok, ok = w.handedPrev[key]
	}
	return ok && tok == "", tok
}

// ID is the worker's id (WithID), the Worker of its reports.
func (w *Worker) ID() string { return w.id }
