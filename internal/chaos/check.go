package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// The checks (Violation.Check).
const (
	checkStartsOverBudget  = "body_starts_over_budget"        // more starts than the fence's max attempts (1 for a non-replayable tool)
	checkAttemptTwice      = "attempt_started_twice"          // one attempt's body started more than once
	checkNoFence           = "body_start_without_fence"       // a body started with no fence in the log
	checkBeforeFence       = "body_start_before_fence"        // a body started before its fence was stored
	checkAfterLost         = "body_start_after_attempt_lost"  // a body started after its attempt was recorded lost
	checkAfterEnd          = "body_start_after_run_finished"  // a body started after its run finished
	checkEndedNotRun       = "attempted_action_ended_not_run" // an action with a fenced attempt ended as if it never ran
	checkNotFinished       = "run_not_finished"               // a run was not finished at the end of the quiet phase
	checkAudit             = "audit_verify"                   // the history or the projection failed weft audit verify
	checkSigned            = "finished_run_not_signed"        // a finished run's history failed weft audit verify --trust with the runners' head key
	checkProjectionBehind  = "projection_behind"              // the projector never caught up with the log
	checkAckLost           = "acknowledged_event_lost"        // an append the server acknowledged is not in the log
	checkDuplicated        = "event_duplicated"               // an event is in the log twice
	checkCommandLost       = "acknowledged_command_lost"      // a command answered ok left no trace in the log
	checkTwoWinners        = "two_approvals_won"              // concurrent approvals of one request were both answered ok
	checkRefusalWrong      = "refusal_contradicted_by_log"    // a refusal the log before and after the command contradicts
	checkSelfTakeover      = "self_takeover"                  // a runner recovered from itself a run it had not handed off
	checkProcessPanicked   = "process_panicked"               // a part's process panicked
	checkVersionsNotSerial = "versions_not_serial"            // a run's versions in the stream are not 1, 2, 3, ...
	checkForeignServer     = "foreign_server"                 // a client of the harness was refused by a server on a node's port: not this harness's node
)

// timed is an event with the server's timestamp of its message.
type timed struct {
	env events.Envelope
	seq uint64
	at  time.Time
}

// scan reads the whole event log stream with the server's timestamps.
func (h *harness) scan(ctx context.Context) (map[string][]timed, map[uint64]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s, err := h.js.Stream(cctx, eventlog.Stream)
	if err != nil {
		return nil, nil, err
	}
	last := s.CachedInfo().State.LastSeq
	runs, first := map[string][]timed{}, map[uint64]string{}
	if last == 0 {
		return runs, first, nil
	}
	cons, err := h.js.OrderedConsumer(cctx, eventlog.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, nil, err
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, nil, err
			}
			var body struct {
				Events []events.Envelope `json:"events"`
			}
			if err := json.Unmarshal(m.Data(), &body); err != nil {
				return nil, nil, fmt.Errorf("seq %d: %w", meta.Sequence.Stream, err)
			}
			if len(body.Events) > 0 {
				first[meta.Sequence.Stream] = body.Events[0].ID
			}
			for _, env := range body.Events {
				runs[env.Run] = append(runs[env.Run], timed{env: env, seq: meta.Sequence.Stream, at: meta.Timestamp})
			}
			if meta.Sequence.Stream >= last {
				return runs, first, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		if n == 0 && cctx.Err() != nil {
			return nil, nil, cctx.Err()
		}
	}
}

// foldAt folds the events stored at or before t.
func foldAt(evs []timed, t time.Time) aggregate.State {
	var recs []events.Recorded
	for _, e := range evs {
		if e.at.After(t) {
			break
		}
		rec, err := projector.Recorded(e.env)
		if err != nil {
			break
		}
		recs = append(recs, rec)
	}
	return aggregate.Fold(recs)
}

// projectedWithin bounds how long, once the quiet phase has the server
// and every part up again, the stored views may take to reach their
// runs' log heads: three times the projector's stall bound (its watchdog
// resumes from the checkpoint when the log is ahead and nothing moved for
// projector.StallAfter), which covers a stall, the pause before the
// projector resumes and the catching up.
const projectedWithin = 3 * projector.StallAfter

// lag is a run whose stored view is not at its log head.
type lag struct {
	run  string
	view uint64 // the stored view's version (0: none stored)
	head uint64 // the log's
	err  error  // the view could not be read or decoded
}

func (l lag) String() string {
	switch {
	case l.err != nil:
		return fmt.Sprintf("%s (log at %d, view unreadable: %v)", l.run, l.head, l.err)
	case l.view == 0:
		return fmt.Sprintf("%s (log at %d, no view)", l.run, l.head)
	}
	return fmt.Sprintf("%s (log at %d, view at %d)", l.run, l.head, l.view)
}

// waitProjected waits, at most projectedWithin, until every run's stored
// view is at its log head. A miss names every run behind, with its view's
// and its log's versions, and what the projector was doing
// (projectorState).
func (h *harness) waitProjected(ctx context.Context, runs []string) error {
	deadline := time.Now().Add(projectedWithin)
	for {
		behind, err := h.behind(ctx, runs)
		if err == nil && len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not every run was projected to its head within %s, and the views cannot be read: %w; %s", projectedWithin, err, h.projectorState(ctx))
			}
			names := make([]string, len(behind))
			for i, l := range behind {
				names[i] = l.String()
			}
			return fmt.Errorf("%d run(s) not projected to their head within %s: %s; %s", len(behind), projectedWithin, strings.Join(names, ", "), h.projectorState(ctx))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (h *harness) behind(ctx context.Context, runs []string) ([]lag, error) {
	kv, err := h.js.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		return nil, err
	}
	var behind []lag
	for _, run := range runs {
		_, head, err := h.evlog.Load(ctx, run)
		if err != nil {
			return nil, err
		}
		if head.IsZero() {
			continue
		}
		e, err := kv.Get(ctx, run)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			behind = append(behind, lag{run: run, head: head.Version})
			continue
		}
		if err != nil {
			return nil, err
		}
		v, err := projections.DecodeView(e.Value())
		if err != nil || v.Version != head.Version {
			behind = append(behind, lag{run: run, view: v.Version, head: head.Version, err: err})
		}
	}
	return behind, nil
}

// projectorState says what the projector was doing when the views missed
// their bound: its stored checkpoint against the log's last sequence, the
// holder of its lease, the last lines it logged, and where its goroutines
// are (it is sent SIGQUIT, which writes them to its log and ends it).
func (h *harness) projectorState(ctx context.Context) string {
	var b strings.Builder
	b.WriteString("the projector: ")
	if st, err := h.js.KeyValue(ctx, projector.BucketState); err != nil {
		fmt.Fprintf(&b, "checkpoint unreadable (%v)", err)
	} else if e, err := st.Get(ctx, projector.KeyCheckpoint); err != nil {
		fmt.Fprintf(&b, "checkpoint unreadable (%v)", err)
	} else {
		var cp projector.Checkpoint
		_ = json.Unmarshal(e.Value(), &cp)
		fmt.Fprintf(&b, "checkpoint %d", cp.Seq)
	}
	if s, err := h.js.Stream(ctx, eventlog.Stream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			fmt.Fprintf(&b, " of the log's %d", info.State.LastSeq)
		}
	}
	if l, err := h.js.KeyValue(ctx, projector.BucketLease); err == nil {
		if e, err := l.Get(ctx, projector.KeyLeaseHolder); err == nil {
			fmt.Fprintf(&b, ", lease held by %s", e.Value())
		} else {
			fmt.Fprintf(&b, ", lease not held (%v)", err)
		}
	}
	fmt.Fprintf(&b, "; it logged last: %s", logTail(h.projector.log, 3))
	if _, ok := h.projector.signal(syscall.SIGQUIT, true, 0); ok {
		fmt.Fprintf(&b, "; its goroutines (SIGQUIT) are in %s", h.projector.log)
	}
	return b.String()
}

// notRun are the end states that tell the model an action did not happen.
var notRun = map[aggregate.ActionState]bool{
	aggregate.ActionNotStarted: true, aggregate.ActionRejected: true, aggregate.ActionDenied: true,
	aggregate.ActionInvalidArguments: true, aggregate.ActionUnknownTool: true, aggregate.ActionLimitReached: true,
}

// check runs every check after the quiet phase.
func (h *harness) check(ctx context.Context, w *workload) *Result {
	res := &Result{Seed: h.cfg.Seed, Config: h.cfg, Outcomes: map[string]int{}, Ends: map[string]int{}}
	v := func(check, run, action, format string, args ...any) {
		h.violate(Violation{Check: check, Run: run, Action: action, Detail: fmt.Sprintf(format, args...)})
	}
	var runs []string
	for _, p := range w.plans {
		runs = append(runs, p.id)
	}
	if err := h.waitProjected(ctx, runs); err != nil {
		v(checkProjectionBehind, "", "", "%v", err)
	}
	acks := h.readAcks()
	// The cluster may still be electing a stream leader after the quiet
	// phase's restarts ("no responders"): the log is read again for up to
	// a minute before the checks call it unreadable.
	stream, first, err := h.scan(ctx)
	for wait := time.Now().Add(time.Minute); err != nil && ctx.Err() == nil && time.Now().Before(wait); {
		time.Sleep(time.Second)
		stream, first, err = h.scan(ctx)
	}
	if err != nil {
		v(checkAudit, "", "", "cannot read the event log: %v", err)
		return h.finish(res)
	}
	var starts []bodyStart
	for _, s := range readStarts(h.ledger) {
		if s.Late {
			res.LateCalls++
			continue
		}
		starts = append(starts, s)
	}
	res.BodyStarts = len(starts)
	byAction := map[string][]bodyStart{}
	for _, s := range starts {
		k := s.Run + " " + s.Action
		byAction[k] = append(byAction[k], s)
	}
	// When each event was known to be acknowledged: a read that began
	// after it sees it (on a cluster, the stored time can precede the
	// quorum's commit).
	ackedAt := map[string]time.Time{}
	for _, a := range acks {
		for i := range max(a.n, 1) {
			k := fmt.Sprintf("%s %d", a.run, a.version+uint64(i))
			if t, ok := ackedAt[k]; !ok || a.at.Before(t) {
				ackedAt[k] = a.at
			}
		}
	}
	visible := func(run string, e timed) time.Time {
		if t, ok := ackedAt[fmt.Sprintf("%s %d", run, e.env.Version)]; ok && t.After(e.at) {
			return t
		}
		return e.at
	}
	views, _ := h.js.KeyValue(ctx, projector.BucketViews)
	claims, _ := h.js.KeyValue(ctx, claimsBucket)
	unknown := unknownCloses(filepath.Join(h.dir, "logs")) // precision.go
	ids := map[string]int{}
	for _, run := range runs {
		evs := stream[run]
		if len(evs) == 0 {
			continue
		}
		res.Runs++
		for i, e := range evs {
			ids[e.env.ID]++
			if e.env.Version != uint64(i+1) {
				v(checkVersionsNotSerial, run, "", "event %d of the stream has version %d", i+1, e.env.Version)
				break
			}
		}
		h.checkAudit(ctx, res, run, views, v)
		s := foldAt(evs, time.Now().Add(time.Hour))
		st := aggregate.Status(s)
		if o, ok := s.Finished(); ok {
			res.Outcomes[o.Kind]++
		} else {
			v(checkNotFinished, run, "", "status %s (approvals %v, uncertain %v)", st.Kind, st.Approvals, st.Uncertain)
		}
		var (
			finishedAt time.Time
			finished   timed
		)
		fences := map[string]timed{}
		lost := map[string]timed{}
		for _, e := range evs {
			ev, err := e.env.Event()
			if err != nil {
				continue
			}
			switch ev := ev.(type) {
			case events.RunRecovered:
				res.Takeovers++
				// A run this runner handed off (a partition it released,
				// then claimed again) is resumed with cause handed_off: it
				// drove the run no more, nothing of it was in flight.
				// Any other recovery from itself took over a run it drove
				// (docs/semantics.md §8).
				if ev.Previous == ev.Runner && ev.Cause != events.RecoveredHandedOff && !h.cfg.StableIDs {
					v(checkSelfTakeover, run, "", "%s recovered the run from itself (version %d)", ev.Runner, e.env.Version)
				}
			case events.AttemptFenced:
				fences[fmt.Sprintf("%s %d", ev.Action, ev.Attempt)] = e
			case events.AttemptLost:
				k := fmt.Sprintf("%s %d", ev.Action, ev.Attempt)
				if _, ok := lost[k]; !ok {
					lost[k] = e
				}
			case events.RunFinished:
				finishedAt, finished = e.at, e
			}
		}
		for _, a := range s.Actions() {
			res.Actions++
			res.Ends[string(a.State)]++
			res.Precision.add(ctx, claims, unknown, run, a, byAction[run+" "+a.ID], v)
			if a.Attempts > len(a.Closed) && notRun[a.State] { // closed attempts did not run (precision.go)
				v(checkEndedNotRun, run, a.ID, "%d fenced attempt(s), ended %s (%s)", a.Attempts, a.State, a.Detail)
			}
			ss := byAction[run+" "+a.ID]
			if len(ss) == 0 {
				continue
			}
			if budget := a.Attempt.MaxAttempts; len(ss) > max(budget, 1) {
				v(checkStartsOverBudget, run, a.ID, "%s: %d body starts, max attempts %d", a.Tool, len(ss), budget)
			}
			per := map[int]int{}
			for _, b := range ss {
				per[b.Attempt]++
				if per[b.Attempt] == 2 {
					v(checkAttemptTwice, run, a.ID, "%s attempt %d started twice (%s)", a.Tool, b.Attempt, processes(ss, b.Attempt))
				}
				k := fmt.Sprintf("%s %d", a.ID, b.Attempt)
				f, ok := fences[k]
				switch {
				case !ok:
					v(checkNoFence, run, a.ID, "%s attempt %d started in %s with no fence in the log", a.Tool, b.Attempt, b.Process)
				case b.At.Before(f.at):
					v(checkBeforeFence, run, a.ID, "%s attempt %d started %s before its fence was stored", a.Tool, b.Attempt, f.at.Sub(b.At))
				}
				// A start after its attempt was recorded lost (or its run
				// finished) is a violation when the worker's last look
				// began once that was acknowledged: the look saw it, or
				// should have. A look that began before it, followed by a
				// start after it, is the gap between a worker's last look and
				// its body's first instruction — microseconds, unless the
				// process was paused or starved of CPU there — which no check
				// before a start can close (docs/reliability.md): counted.
				unseen := false
				if l, ok := lost[k]; ok && b.At.After(l.at) {
					switch at := visible(run, l); {
					case b.Look.began.IsZero():
						v(checkAfterLost, run, a.ID, "%s attempt %d started in %s %s after it was recorded lost (version %d: %s), with no look at the run recorded%s", a.Tool, b.Attempt, b.Process, b.At.Sub(l.at), l.env.Version, lostCause(l), pastDeadline(f, ok, b))
					case !b.Look.began.Before(at):
						v(checkAfterLost, run, a.ID, "%s attempt %d started in %s %s after it was recorded lost (version %d: %s), though the worker's last look began %s after that was acknowledged%s", a.Tool, b.Attempt, b.Process, b.At.Sub(l.at), l.env.Version, lostCause(l), b.Look.began.Sub(at), pastDeadline(f, ok, b))
					default:
						unseen = true
						res.unseen(b.At.Sub(l.at), b.At.Sub(b.Look.ended))
					}
				}
				if !finishedAt.IsZero() && b.At.After(finishedAt) {
					switch at := visible(run, finished); {
					case b.Look.began.IsZero() || !b.Look.began.Before(at):
						v(checkAfterEnd, run, a.ID, "%s attempt %d started in %s %s after the run finished (its worker's last look began %s after that was acknowledged)", a.Tool, b.Attempt, b.Process, b.At.Sub(finishedAt), b.Look.began.Sub(at))
					case !unseen:
						res.unseen(b.At.Sub(finishedAt), b.At.Sub(b.Look.ended))
					}
				}
			}
		}
	}
	for id, n := range ids {
		if n > 1 {
			v(checkDuplicated, "", "", "event %s is in the log %d times", id, n)
		}
	}
	for _, a := range acks {
		if got, ok := first[a.seq]; !ok || got != a.id {
			v(checkAckLost, a.run, "", "version %d (event %s) was acknowledged at sequence %d by %s; the stream has %q there", a.version, a.id, a.seq, a.by, got)
		}
	}
	h.checkCommands(w, stream, v)
	return h.finish(res)
}

func processes(ss []bodyStart, attempt int) string {
	var ps []string
	for _, s := range ss {
		if s.Attempt == attempt {
			ps = append(ps, s.Process)
		}
	}
	return strings.Join(ps, ", ")
}

// checkAudit is weft audit verify of one run: chain, refold and the stored
// view byte for byte.
func (h *harness) checkAudit(ctx context.Context, res *Result, run string, views jetstream.KeyValue, v func(check, run, action, format string, args ...any)) {
	envs, head, err := h.evlog.Load(ctx, run)
	if err != nil {
		v(checkAudit, run, "", "load: %v", err)
		return
	}
	opts := []audit.Option{audit.WithHead(head.Hash)}
	if views != nil {
		if e, err := views.Get(ctx, run); err == nil {
			opts = append(opts, audit.WithView(e.Value()))
		} else {
			v(checkAudit, run, "", "no stored view: %v", err)
		}
	}
	if rep := audit.Verify(envs, opts...); !rep.OK() {
		v(checkAudit, run, "", "%s", rep.Problem.Error())
	}
	// Every finished run verifies against the runners' head key, whatever
	// runner died between a decision and its signature (runner/signhead.go).
	finished := slices.ContainsFunc(envs, func(env events.Envelope) bool { return env.Type == events.NameRunFinished })
	if h.headKey != "" && finished {
		if rep := audit.Verify(envs, audit.WithTrust(h.headKey)); !rep.OK() {
			v(checkSigned, run, "", "%s", rep.Problem.Error())
		}
	}
}

// ack is one acknowledged append a runner recorded.
type ack struct {
	seq, version uint64
	run, id, by  string
	n            int       // events in the message: versions version..version+n-1
	at           time.Time // when the runner had the acknowledgement
}

// readAcks reads every runner's ack ledger (and counts the runners'
// self-inflicted pauses). It runs before the stream is scanned, so every
// acknowledgement it reads was given for a sequence the scan covers.
func (h *harness) readAcks() []ack {
	var out []ack
	files, _ := filepath.Glob(filepath.Join(h.dir, "acks", "*"))
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			switch {
			case len(fs) == 7 && fs[0] == "ack":
				seq, err := strconv.ParseUint(fs[1], 10, 64)
				if err != nil {
					continue
				}
				out = append(out, ack{seq: seq, version: mustUint(fs[3]), run: fs[2], id: fs[4], by: filepath.Base(name),
					n: int(mustUint(fs[5])), at: fromNanos(int64(mustUint(fs[6])))})
			case len(fs) == 4 && fs[0] == "self" && fs[1] == "SIGSTOP":
				h.fault("runner SIGSTOP after append")
			}
		}
		f.Close()
	}
	return out
}

func mustUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// checkCommands checks the workload's commands against the log: an ok
// answer left its event; concurrent approvals had one winner; a refusal is
// not contradicted by the log before and after it.
func (h *harness) checkCommands(w *workload, stream map[string][]timed, v func(check, run, action, format string, args ...any)) {
	h.mu.Lock()
	cmds := append([]command{}, h.cmds...)
	h.mu.Unlock()
	winners := map[string]map[string]bool{}
	for _, c := range cmds {
		evs := stream[c.run]
		if c.ok {
			if !inLog(evs, c) {
				v(checkCommandLost, c.run, c.action, "%s %s (revision %d) was answered ok; the log has no trace of it", c.kind, c.id, c.rev)
			}
			if c.kind == "approve" {
				k := fmt.Sprintf("%s %s %d", c.run, c.action, c.rev)
				if winners[k] == nil {
					winners[k] = map[string]bool{}
				}
				winners[k][c.id] = true
			}
			continue
		}
		if c.transient() {
			continue
		}
		before, after := foldAt(evs, c.sent), foldAt(evs, c.recv)
		switch c.kind {
		case "approve", "reject":
			if refusal[c.code] && pending(before, c) && pending(after, c) && !expiredBy(after, c) {
				v(checkRefusalWrong, c.run, c.action, "%s %s refused %s, but revision %d was pending in the log before and after", c.kind, c.id, c.code, c.rev)
			}
		case "reconcile", "reconcile_stored":
			if c.code == "not_reconcilable" && uncertain(before, c.action) && uncertain(after, c.action) {
				v(checkRefusalWrong, c.run, c.action, "%s %s refused not_reconcilable, but the action was uncertain before and after", c.kind, c.id)
			}
		}
	}
	keys := make([]string, 0, len(winners))
	for k := range winners {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := len(winners[k]); n > 1 {
			f := strings.Fields(k)
			v(checkTwoWinners, f[0], f[1], "%d approvals of revision %s answered ok", n, f[2])
		}
	}
}

// refusal are the answers to an approval that say the request cannot be
// answered (outcome_unknown says nothing).
var refusal = map[string]bool{"wrong_reference": true, "stale_reference": true, "already_answered": true,
	"approval_expired": true, "run_ended": true, "proof_refused": true}

// expiredBy reports whether c, refused approval_expired, reached the
// runner after its request's recorded deadline: the refusal follows from
// the log's deadline and the store's clock (docs/semantics.md §4), and the
// expiry itself is recorded by the command when it can be, else by the
// request's timer — it may so land after the answer (a server down then).
func expiredBy(s aggregate.State, c command) bool {
	if c.code != "approval_expired" {
		return false
	}
	a, ok := s.Action(c.action)
	return ok && !a.Request.Expires.IsZero() && !c.recv.Before(a.Request.Expires)
}

func pending(s aggregate.State, c command) bool {
	if _, done := s.Finished(); done {
		return false
	}
	a, ok := s.Action(c.action)
	return ok && a.State == aggregate.ActionAwaitingApproval && a.Request.Revision == c.rev && a.Request.Pending()
}

func uncertain(s aggregate.State, action string) bool {
	a, ok := s.Action(action)
	return ok && a.State == aggregate.ActionUncertain
}

// inLog reports whether the log holds the event an ok answer to c stands
// for.
func inLog(evs []timed, c command) bool {
	if c.kind == "start" {
		return len(evs) > 0
	}
	for _, e := range evs {
		ev, err := e.env.Event()
		if err != nil {
			continue
		}
		switch ev := ev.(type) {
		case events.ApprovalAnswered:
			if (c.kind == "approve" && ev.Answer == events.AnswerApprove || c.kind == "reject" && ev.Answer == events.AnswerReject) &&
				ev.Action == c.action && ev.Revision == c.rev {
				return true
			}
		case events.CancelRequested:
			if c.kind == "cancel" {
				return true
			}
		case events.Reconciled:
			if (c.kind == "reconcile" || c.kind == "reconcile_stored") && ev.Action == c.action {
				return true
			}
		case events.SettlementAccepted:
			if c.kind == "settle" && ev.Action == c.action {
				return true
			}
		}
	}
	return false
}

func readStarts(path string) []bodyStart {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []bodyStart
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s, ok := parseStart(sc.Text()); ok {
			out = append(out, s)
		}
	}
	return out
}

func (h *harness) finish(res *Result) *Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	res.Faults = map[string]int{}
	for k, n := range h.faults {
		res.Faults[k] = n
	}
	res.Violations = append([]Violation{}, h.violations...)
	sort.SliceStable(res.Violations, func(i, j int) bool { return res.Violations[i].Check < res.Violations[j].Check })
	res.Notes = append([]string{}, h.notes...)
	if note := availabilityNote(h.kills, h.cmds, h.cfg.Lease); note != "" {
		res.Notes = append(res.Notes, note)
	}
	res.Answers = map[string]int{}
	internal := 0
	for _, c := range h.cmds {
		code := c.code
		if c.ok {
			code = "ok"
		}
		res.Answers[c.kind+" "+code]++
		// internal is a bug by the protocol's table: say what it was.
		if c.code == string(weft.CodeInternal) && internal < 5 {
			internal++
			res.Notes = append(res.Notes, fmt.Sprintf("%s of run %s answered internal: %s", c.kind, c.run, c.msg))
		}
	}
	return res
}

func lostCause(l timed) string {
	ev, err := l.env.Event()
	if lost, ok := ev.(events.AttemptLost); err == nil && ok {
		return lost.Cause + ", next " + lost.Next
	}
	return "?"
}

// pastDeadline says when a body started after its fence's deadline.
func pastDeadline(f timed, ok bool, b bodyStart) string {
	if !ok {
		return ""
	}
	ev, err := f.env.Event()
	if fence, isFence := ev.(events.AttemptFenced); err == nil && isFence && fence.Deadline != nil && b.At.After(*fence.Deadline) {
		return fmt.Sprintf("; %s after the fence's deadline", b.At.Sub(*fence.Deadline))
	}
	return ""
}
