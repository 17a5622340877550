package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

// plan is one run of the workload, fixed by the seed.
type plan struct {
	id     string
	at     time.Duration // start, from the beginning of the fault phase
	script script
	cancel time.Duration // cancel this long after the start; 0: never
	// expire: the workload never answers the run's approval requests,
	// left to expire (expiryProbes).
	expire bool
}

// makePlans draws the workload's runs.
func makePlans(cfg Config) []plan {
	r := rand.New(rand.NewPCG(cfg.Seed, 1))
	var plans []plan
	for i := range cfg.Runs {
		p := plan{id: fmt.Sprintf("s%d-%04d", cfg.Seed, i+1), at: uniform(r, 0, cfg.Duration*8/10+time.Millisecond)}
		for range 1 + r.IntN(3) {
			var c call
			switch n := r.IntN(13); {
			case n < 3:
				c = call{Tool: toolRead, Args: args{MS: r.Int64N(1500), Fail: r.IntN(20) == 0}}
			case n < 5:
				c = call{Tool: toolFetch, Args: args{MS: r.Int64N(1500), Fail: r.IntN(20) == 0}}
			case n < 8:
				c = call{Tool: toolShip, Args: args{MS: r.Int64N(1500), Fail: r.IntN(20) == 0}}
			case n < 11:
				amount := int64(50)
				if r.IntN(10) < 6 {
					amount = approvalLimit + 1 + r.Int64N(400)
				}
				c = call{Tool: toolPay, Args: args{MS: r.Int64N(800), Amount: amount}}
			default:
				c = call{Tool: toolHold, Args: args{MS: 200 + r.Int64N(1200), Settle: r.IntN(10) < 7, SettleMS: r.Int64N(2500)}}
			}
			p.script.Calls = append(p.script.Calls, c)
		}
		if r.IntN(10) < 4 {
			p.script.ModelMS = 50 + r.Int64N(1200)
		}
		if r.IntN(100) < 15 {
			p.cancel = uniform(r, time.Millisecond, 4*time.Second)
		}
		plans = append(plans, p)
	}
	return plans
}

// choice derives a decision of the workload from the seed and names (an
// approval's answer, a reconciliation's content), so it does not depend on
// when the workload meets the question.
func choice(seed uint64, parts ...string) uint64 {
	f := fnv.New64a()
	fmt.Fprint(f, seed)
	for _, p := range parts {
		f.Write([]byte{0})
		f.Write([]byte(p))
	}
	return f.Sum64()
}

// command is one command the workload sent, with its answer, for the
// checks: a definite answer must agree with the log.
type command struct {
	kind   string // start, approve, reject, cancel, reconcile, reconcile_stored, settle
	run    string
	action string
	rev    int
	id     string
	sent   time.Time
	recv   time.Time
	ok     bool
	code   string // the refusal's code; "" when ok; "transport" when no answer came
	msg    string // the refusal's message
}

// transient reports whether a command's answer leaves its outcome open, so
// the workload sends it again with the same command id.
func (c command) transient() bool {
	// Retryable codes, and internal: a refusal the runtime answered for
	// its own state (docs/semantics.md §8) is sent again, never taken as the
	// command's answer.
	if code := weft.Code(c.code); code == "transport" || code == weft.CodeInternal || code.Retryable() {
		return true
	}
	return !c.ok && !known(c.code)
}

func known(code string) bool {
	for _, k := range []weft.Code{weft.CodeAlreadyStarted, weft.CodeWrongReference, weft.CodeStaleReference, weft.CodeAlreadyAnswered,
		weft.CodeApprovalExpired, weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeNotReconcilable, weft.CodeAlreadyRecorded,
		weft.CodeNotAwaited, weft.CodeInvalidContent, weft.CodeRunActive, weft.CodeUnknownRun,
		// Kept for its command id: the run is read again and a new id sent.
		weft.CodeOutcomeUnknown} {
		if string(k) == code {
			return true
		}
	}
	return false
}

// workload drives the plans' runs: it starts each at its time and answers
// what it asks (approvals, some concurrently, some rejected; uncertain
// effects; the settling tool's callbacks), cancels some, until every run
// finished with nothing uncertain left or its context ends.
type workload struct {
	h     *harness
	plans []plan
	quiet chan struct{} // closed when the quiet phase begins
	t0    time.Time

	mu       sync.Mutex
	started  map[string]bool // runs whose start was acknowledged
	finished map[string]bool
}

func (w *workload) run(ctx context.Context) {
	w.t0 = time.Now()
	w.started, w.finished = map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for i, p := range w.plans {
		wg.Add(1)
		go func() { defer wg.Done(); w.drive(ctx, p, uint64(i)) }()
	}
	wg.Wait()
}

func (w *workload) inQuiet() bool {
	select {
	case <-w.quiet:
		return true
	default:
		return false
	}
}

// wait sleeps d, cut short when the quiet phase begins meanwhile; false
// when ctx ended.
func (w *workload) wait(ctx context.Context, d time.Duration) bool {
	quiet := w.quiet
	if w.inQuiet() {
		quiet = nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-quiet:
		return ctx.Err() == nil
	}
}

// runDriver is the workload's memory of one run.
type runDriver struct {
	p         plan
	started   time.Time
	seen      map[string]time.Time // question key → first seen
	done      map[string]bool      // question key → answered definitely
	tries     map[string]int       // question key → refused answers so far
	cancelled bool
}

func (w *workload) drive(ctx context.Context, p plan, i uint64) {
	r := rand.New(rand.NewPCG(w.h.cfg.Seed, 100+i))
	t := time.NewTimer(time.Until(w.t0.Add(p.at)))
	select {
	case <-ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	d := &runDriver{p: p, seen: map[string]time.Time{}, done: map[string]bool{}, tries: map[string]int{}}
	// Every wait grows while nothing moves (unanswered starts, a run that
	// does not change), up to 16 times the base: a starved deployment is
	// not buried under the workload's own retries and reads.
	back := time.Duration(1)
	for ctx.Err() == nil {
		c := w.send(ctx, command{kind: "start", run: p.id, id: "start-" + p.id}, func(ctx context.Context) error {
			_, err := w.h.client.Start(ctx, api.StartRequest{CommandID: "start-" + p.id, Run: p.id, Agent: AgentName, Input: p.script.String()})
			return err
		})
		if !c.transient() {
			break
		}
		w.wait(ctx, back*uniform(r, 100*time.Millisecond, 400*time.Millisecond))
		back = min(back*2, 16)
	}
	d.started = time.Now()
	w.mu.Lock()
	w.started[p.id] = true
	w.mu.Unlock()
	back = 1
	var seen uint64
	for ctx.Err() == nil {
		s, err := w.h.fold(ctx, p.id)
		if err == nil && s.Exists() && w.step(ctx, d, s) {
			w.mu.Lock()
			w.finished[p.id] = true
			w.mu.Unlock()
			return
		}
		if err == nil && s.Version() != seen {
			seen, back = s.Version(), 1
		} else {
			back = min(back*2, 16)
		}
		w.wait(ctx, back*uniform(r, 150*time.Millisecond, 350*time.Millisecond))
	}
}

// step acts on the run's current state; true once the run finished with
// nothing left uncertain.
func (w *workload) step(ctx context.Context, d *runDriver, s aggregate.State) bool {
	st := aggregate.Status(s)
	_, finished := s.Finished()
	if finished && len(st.Uncertain) == 0 {
		return true
	}
	if !finished && d.p.cancel > 0 && !d.cancelled && time.Since(d.started) >= d.p.cancel {
		c := w.send(ctx, command{kind: "cancel", run: d.p.id, id: "cancel-" + d.p.id}, func(ctx context.Context) error {
			_, err := w.h.client.Cancel(ctx, api.CancelRequest{CommandID: "cancel-" + d.p.id, Run: d.p.id, Reason: "chaos", By: "chaos"})
			return err
		})
		d.cancelled = !c.transient()
	}
	seed := w.h.cfg.Seed
	for _, a := range s.Actions() {
		switch {
		case a.State == aggregate.ActionAwaitingApproval && a.Request.Pending():
			key := fmt.Sprintf("answer %s r%d", a.ID, a.Request.Revision)
			ch := choice(seed, d.p.id, key)
			if d.p.expire || d.done[key] || !w.due(d, key, w.answerDelay(ch)) || w.leftToExpire(ch, a.Request.Expires) {
				continue
			}
			w.answer(ctx, d, a, key, ch)
		case a.State == aggregate.ActionUncertain:
			key := "reconcile " + a.ID
			ch := choice(seed, d.p.id, key)
			if d.done[key] || !w.due(d, key, time.Duration(ch>>8%2000)*time.Millisecond) {
				continue
			}
			w.reconcile(ctx, d, a, key, ch, finished)
		case a.Tool == toolHold && a.State == aggregate.ActionSettling:
			key := "settle " + a.ID
			ch := choice(seed, d.p.id, key)
			if ch%100 >= 30 || d.done[key] || !w.due(d, key, time.Duration(ch>>8%1500)*time.Millisecond) {
				continue
			}
			id := "settle-" + d.p.id + "-" + a.ID
			c := w.send(ctx, command{kind: "settle", run: d.p.id, action: a.ID, id: id}, func(ctx context.Context) error {
				_, err := w.h.client.Settle(ctx, api.Settlement{CommandID: id, Run: d.p.id, Action: a.ID, Outcome: events.OutcomeOutput,
					Content: json.RawMessage(`{"done":"settled by the workload"}`), Summary: "hold " + a.ID + " settled by the workload"})
				return err
			})
			d.done[key] = !c.transient()
		}
	}
	return false
}

// due reports whether a question first seen now or earlier has waited its
// delay (none in the quiet phase).
func (w *workload) due(d *runDriver, key string, delay time.Duration) bool {
	first, ok := d.seen[key]
	if !ok {
		first = time.Now()
		d.seen[key] = first
	}
	return w.inQuiet() || time.Since(first) >= delay
}

// answer answers a pending approval request: a quarter are rejected, the
// others approved by one to four approvers at once (exactly one may win).
func (w *workload) answer(ctx context.Context, d *runDriver, a aggregate.Action, key string, ch uint64) {
	run, rev := d.p.id, a.Request.Revision
	try := d.tries[key]
	if ch%100 < 25 {
		id := fmt.Sprintf("reject-%s-%s-r%d-t%d", run, a.ID, rev, try)
		c := w.send(ctx, command{kind: "reject", run: run, action: a.ID, rev: rev, id: id}, func(ctx context.Context) error {
			_, err := w.h.client.Reject(ctx, api.RejectRequest{CommandID: id, Run: run, Action: a.ID, Revision: rev, Reason: "chaos says no", Approver: "desk", Credential: "rejecter"})
			return err
		})
		w.settled(d, key, []command{c})
		return
	}
	k := 1 + int(ch>>4%4)
	cs := make([]command, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("approve-%s-%s-r%d-t%d-%d", run, a.ID, rev, try, i)
			cs[i] = w.send(ctx, command{kind: "approve", run: run, action: a.ID, rev: rev, id: id}, func(ctx context.Context) error {
				_, err := w.h.client.Approve(ctx, api.ApproveRequest{CommandID: id, Run: run, Action: a.ID, Revision: rev, Approver: "desk", Credential: "approver-" + strconv.Itoa(i)})
				return err
			})
		}()
	}
	wg.Wait()
	w.settled(d, key, cs)
}

// settled records the answers to one question: done once one was definite;
// a definite refusal that is not already_answered is asked again with new
// command ids if the request is still pending (the check judges whether
// the refusal was right).
func (w *workload) settled(d *runDriver, key string, cs []command) {
	for _, c := range cs {
		switch {
		case c.ok, c.code == string(weft.CodeAlreadyAnswered), c.code == string(weft.CodeRunEnded):
			d.done[key] = true
			return
		}
	}
	for _, c := range cs {
		if !c.transient() {
			d.tries[key]++
			return
		}
	}
}

func (w *workload) reconcile(ctx context.Context, d *runDriver, a aggregate.Action, key string, ch uint64, finished bool) {
	var content json.RawMessage
	switch ch % 4 {
	case 0, 1:
		content = json.RawMessage(`{"done":"reconciled by the workload"}`)
	case 2:
		content = tools.FailedReconciliation("it did not happen")
	default:
		content = tools.Unconfirmed("nobody knows yet")
	}
	kind := "reconcile"
	if finished {
		kind = "reconcile_stored"
	}
	id := fmt.Sprintf("%s-%s-%s-t%d", kind, d.p.id, a.ID, d.tries[key])
	c := w.send(ctx, command{kind: kind, run: d.p.id, action: a.ID, id: id}, func(ctx context.Context) error {
		req := api.ReconcileRequest{CommandID: id, Run: d.p.id, Action: a.ID, Content: content, By: "chaos"}
		var err error
		if finished {
			_, err = w.h.client.ReconcileStored(ctx, req)
		} else {
			_, err = w.h.client.Reconcile(ctx, req)
		}
		return err
	})
	switch {
	case c.ok, c.code == string(weft.CodeNotReconcilable):
		d.done[key] = true
	case !c.transient():
		// run_active / run_ended: the run changed between the read and
		// the command; the next step uses the other form.
		d.tries[key]++
	}
}

// send sends one command with a deadline and records it with its answer.
func (w *workload) send(ctx context.Context, c command, f func(ctx context.Context) error) command {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.sent = time.Now()
	err := f(cctx)
	c.recv = time.Now()
	var we *weft.Error
	switch {
	case err == nil:
		c.ok = true
	case errors.As(err, &we):
		c.code, c.msg = string(we.Code), we.Message
	default:
		c.code = "transport"
	}
	if ctx.Err() == nil {
		w.h.mu.Lock()
		w.h.cmds = append(w.h.cmds, c)
		w.h.mu.Unlock()
	}
	return c
}

// fold reads a run from the log and folds it.
func (h *harness) fold(ctx context.Context, run string) (aggregate.State, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	envs, _, err := h.evlog.Load(cctx, run)
	if err != nil {
		return aggregate.State{}, err
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		rec, err := projector.Recorded(env)
		if err != nil {
			return aggregate.State{}, err
		}
		recs = append(recs, rec)
	}
	return aggregate.Fold(recs), nil
}
