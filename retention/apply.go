package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/timer"
)

// Options says what Apply removes.
type Options struct {
	// OlderThan is the age: a finished run whose last event was recorded
	// before Now minus OlderThan is removed (with the rest of its family).
	OlderThan time.Duration
	// Now is the time the age counts back from (time.Now when zero).
	Now time.Time
	// Until, instead of OlderThan, is the cutoff itself: the finished
	// runs whose last event was recorded before it go — the --until of the
	// range export an auditor keeps, so both select the same runs.
	Until time.Time
	// DryRun lists what would be removed and removes nothing.
	DryRun bool
	// Progress, when set, is called after each run removed: done of total.
	Progress func(done, total int, run string)

	// afterStep, when set (tests), is called after each step of a run's
	// removal; an error stops Apply there, as a crash would.
	afterStep func(run, step string) error
}

// Kept is a run Apply did not remove, and why.
type Kept struct {
	Run string `json:"run"`
	Why string `json:"why"`
}

// Result is what Apply removed and kept.
type Result struct {
	// Cutoff is Until, or Now minus OlderThan (evaluated once).
	Cutoff time.Time `json:"cutoff"`
	DryRun bool      `json:"dry_run,omitempty"`
	// Completed are the runs whose removal an earlier Apply started and
	// did not complete, completed first.
	Completed []string `json:"completed,omitempty"`
	// Purged are the runs removed (with DryRun: that would be).
	Purged []string `json:"purged"`
	// Stopped are the runs whose removal this Apply started or continued
	// (their markers written, part of them removed) and did not complete:
	// set when Apply fails part way, none when it returns no error. The
	// next Apply completes them.
	Stopped []string `json:"stopped,omitempty"`
	// Kept are the runs not removed with why: unfinished, newer than the
	// cutoff, an effect whose outcome nobody knows, a legal hold, a
	// family member kept, a view behind its log.
	Kept []Kept `json:"kept,omitempty"`
}

// The steps of a family's removal, in order (docs/adr/0030): the hold
// check (each run taken by compare-and-set on its holds), the marker in
// weft_purges, then per run the read models (index entries, inbox items,
// summary, and the view last of them), the runtime's state (snapshot,
// claims, driver entry, timers, queued tasks), the events last, and the
// marker made the id's tombstone.
const (
	stepHoldCheck  = "hold_check"
	stepMarked     = "marked"
	stepReadModels = "read_models"
	stepRuntime    = "runtime"
	stepEvents     = "events"
	stepDone       = "done"
)

// marker is the value of a run's key in weft_purges: State is
// statePurging from the mark until the events are gone, then statePurged,
// kept for ever as the run id's tombstone (CheckNotPurged).
type marker struct {
	Started time.Time `json:"started"`
	Cutoff  time.Time `json:"cutoff"`
	State   string    `json:"state,omitempty"`
	// Family is the runs removed together with this one (all of them,
	// itself included): an apply that stopped while it marked them leaves
	// some unmarked, and the next completes them too.
	Family []string `json:"family,omitempty"`
	// Purged is when the removal completed (statePurged).
	Purged *time.Time `json:"purged,omitempty"`
}

// The states of a marker. A marker without a state is an earlier
// release's, whose removal started (statePurging).
const (
	statePurging = "purging"
	statePurged  = "purged"
)

// Apply removes every trace of the finished runs whose last event was
// recorded before the cutoff (Options), family by family: a run is
// removed only with its whole family — its parent and children
// (delegation) and the runs restarted from it or it from (forks), each
// transitively — and only when every run of the family is finished, older
// than the cutoff, has no effect whose outcome nobody knows and no open
// question, has no active legal hold, and has a view up to its log's head.
// So a kept run's parent, children and forks are kept with it, and what is
// kept verifies as before (`weft audit verify`: each run's hash chain is
// its own). It first completes the removals an earlier Apply started and
// did not complete (weft_purges).
func Apply(ctx context.Context, js jetstream.JetStream, o Options) (Result, error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	cutoff := o.Until
	switch {
	case !o.Until.IsZero() && o.OlderThan != 0:
		return Result{}, weft.Errorf(weft.CodeInvalidRequest, "retention: give the cutoff (until) or the age (older than), not both")
	case o.Until.IsZero() && o.OlderThan <= 0:
		return Result{}, weft.Errorf(weft.CodeInvalidRequest, "retention: the age (older than) must be positive, got %s", o.OlderThan)
	case o.Until.IsZero():
		cutoff = now.Add(-o.OlderThan)
	case o.Until.After(now):
		return Result{}, weft.Errorf(weft.CodeInvalidRequest, "retention: the cutoff %s is in the future", o.Until.UTC().Format(time.RFC3339))
	}
	res := Result{Cutoff: cutoff.UTC(), DryRun: o.DryRun, Purged: []string{}}
	holds, purges, err := buckets(ctx, js)
	if err != nil {
		return res, err
	}
	// One apply at a time: two that overlap (a cron that overlaps
	// itself) would each decide on the other's marks.
	var lk *lock
	if !o.DryRun {
		if lk, err = takeLock(ctx, purges); err != nil {
			return res, err
		}
		defer lk.release(context.WithoutCancel(ctx))
	}
	var started []string
	marked := map[string]bool{}
	named := map[string][]string{} // the family each started run's marker names
	if err := eachValue(ctx, purges, func(run string, b []byte) error {
		if strings.Contains(run, ".") {
			return nil // the lock
		}
		marked[run] = true
		var m marker
		if json.Unmarshal(b, &m) == nil && m.State == statePurged {
			return nil // a tombstone: that run is gone
		}
		started = append(started, run)
		named[run] = m.Family
		return nil
	}); err != nil {
		return res, err
	}
	held := map[string]Hold{}
	tookBy := map[string]bool{} // purging set in weft_holds: taken by an apply's hold check
	if err := eachValue(ctx, holds, func(run string, b []byte) error {
		v, err := decodeHolds(run, b)
		if err != nil {
			return err
		}
		if h := v.active(); h.Active() {
			held[run] = h
		}
		if v.Purging != nil {
			tookBy[run] = true
		}
		return nil
	}); err != nil {
		return res, err
	}
	views, err := Views(ctx, js)
	if err != nil {
		return res, err
	}
	// The families whose removal started are completed: the runs the
	// apply which stopped chose (its markers name them; it may have
	// stopped while it marked them), whatever their views say now (a
	// cutoff earlier than that apply's would keep some, and split what it
	// decided). Any other run of their families — one that joined after
	// the mark (a restart), or one that apply never saw — is decided
	// below like any run.
	completing := startedFamilies(started, named, views, marked, tookBy)
	for _, fam := range completing {
		for _, run := range fam {
			if !slices.Contains(started, run) {
				started = append(started, run)
			}
		}
	}
	var taken []string
	for run := range tookBy {
		if !marked[run] && !slices.Contains(started, run) {
			taken = append(taken, run)
		}
	}
	slices.Sort(taken)
	cp, err := projector.ReadCheckpoint(ctx, js)
	if err != nil {
		return res, unavailable("%v", err)
	}
	log := eventlog.New(js)
	byRun := map[string]projections.RunView{}
	for _, v := range views {
		byRun[v.Run] = v
	}
	var doomed [][]string
	for _, fam := range families(views) {
		if err := lk.renew(ctx); err != nil {
			return res, err
		}
		why := map[string]string{}
		for _, run := range fam {
			v, ok := byRun[run]
			switch {
			case slices.Contains(started, run):
				// Its removal started: it goes (below) whatever its view says.
				continue
			case !ok:
				why[run] = "no view of it yet (not projected, or removed)"
				continue
			}
			why[run] = keepWhy(v, res.Cutoff, held)
		}
		// The head check only for the runs that would go.
		for _, run := range fam {
			if why[run] != "" || slices.Contains(started, run) {
				continue
			}
			h, err := log.Head(ctx, run)
			if err != nil {
				return res, err
			}
			if v := byRun[run]; h.Version != v.Version || h.Seq > cp.Seq {
				why[run] = fmt.Sprintf("its view is at version %d and its log at %d (stream sequence %d, the projector's checkpoint %d): the projector is behind", v.Version, h.Version, h.Seq, cp.Seq)
			}
		}
		blocker := ""
		for _, run := range fam {
			if why[run] != "" {
				blocker = run
				break
			}
		}
		split := ""
		for _, run := range fam {
			if slices.Contains(started, run) {
				split = "; the interrupted removal of " + run + "'s family is completed without it"
				break
			}
		}
		var goes []string
		for _, run := range fam {
			switch {
			case slices.Contains(started, run):
			case why[run] != "":
				res.Kept = append(res.Kept, Kept{Run: run, Why: why[run] + split})
			case blocker != "":
				res.Kept = append(res.Kept, Kept{Run: run, Why: fmt.Sprintf("a run of its family is kept: %s (%s)%s", blocker, why[blocker], split)})
			default:
				goes = append(goes, run)
			}
		}
		if len(goes) > 0 {
			doomed = append(doomed, goes)
		}
	}
	if !o.DryRun {
		// Runs an apply took (hold check passed) and stopped before it
		// marked them: they are decided again below.
		for _, run := range taken {
			if err := giveBack(ctx, holds, run); err != nil {
				return res, err
			}
		}
	}
	if o.DryRun {
		for _, fam := range completing {
			if hold := heldOf(fam, held); hold.Active() {
				for _, run := range fam {
					res.Kept = append(res.Kept, Kept{Run: run, Why: interruptedHoldWhy(run, hold)})
				}
				continue
			}
			res.Completed = append(res.Completed, fam...)
		}
		for _, fam := range doomed {
			res.Purged = append(res.Purged, fam...)
		}
		return res, nil
	}
	total := len(started)
	for _, fam := range doomed {
		total += len(fam)
	}
	done := 0
	progress := func(run string) error {
		done++
		if o.Progress != nil {
			o.Progress(done, total, run)
		}
		return lk.renew(ctx)
	}
	tasks, err := queuedTasks(ctx, js)
	if err != nil {
		return res, err
	}
	rm := remover{js: js, purges: purges, tasks: tasks, now: now.UTC(), cutoff: res.Cutoff, after: o.afterStep}
	// begin notes that run's removal was touched (marked, or its removal
	// run); removed that it completed.
	begin := func(run string) {
		if !slices.Contains(res.Stopped, run) {
			res.Stopped = append(res.Stopped, run)
		}
	}
	removed := func(run string) {
		res.Stopped = slices.DeleteFunc(res.Stopped, func(r string) bool { return r == run })
	}
	for _, fam := range completing {
		// Its hold check again, run by run: a marker of an earlier
		// release's apply (a hold could be placed after it), or a run of
		// the family the stopped apply did not mark. A hold on any of it
		// stops the family's removal here.
		var hold Hold
		for _, run := range fam {
			h, err := takeForPurge(ctx, holds, run, now.UTC())
			if err != nil {
				return res, err
			}
			if h.Active() {
				hold = h
				break
			}
		}
		if hold.Active() {
			for _, run := range fam {
				if !marked[run] {
					if err := giveBack(ctx, holds, run); err != nil {
						return res, err
					}
				}
				res.Kept = append(res.Kept, Kept{Run: run, Why: interruptedHoldWhy(run, hold)})
			}
			continue
		}
		for _, run := range fam {
			if marked[run] {
				continue
			}
			m, _ := json.Marshal(marker{Started: now.UTC(), Cutoff: res.Cutoff, State: statePurging, Family: fam})
			if _, err := purges.Put(ctx, run, m); err != nil {
				return res, unavailable("mark %s: %v", run, err)
			}
			begin(run)
		}
		for _, run := range fam {
			begin(run)
			if err := rm.removeRun(ctx, run, byRun[run]); err != nil {
				return res, err
			}
			removed(run)
			res.Completed = append(res.Completed, run)
			if err := progress(run); err != nil {
				return res, err
			}
		}
	}
	for _, fam := range doomed {
		if o.afterStep != nil {
			if err := o.afterStep(fam[0], stepHoldCheck); err != nil {
				return res, err
			}
		}
		// The hold check, run by run, by compare-and-set on the run's
		// holds: a hold placed before it keeps the family, and none is
		// placed after it (Place is refused conflict).
		var hold Hold
		var took []string
		for _, run := range fam {
			h, err := takeForPurge(ctx, holds, run, now.UTC())
			if err != nil {
				return res, err
			}
			if h.Active() {
				hold = h
				break
			}
			took = append(took, run)
		}
		if hold.Active() {
			for _, run := range took {
				if err := giveBack(ctx, holds, run); err != nil {
					return res, err
				}
			}
			for _, run := range fam {
				res.Kept = append(res.Kept, Kept{Run: run, Why: holdWhy(hold)})
			}
			continue
		}
		// The whole family is marked before any of it is removed, so a
		// removal stopped half way is completed for all of it.
		m, _ := json.Marshal(marker{Started: now.UTC(), Cutoff: res.Cutoff, State: statePurging, Family: fam})
		for _, run := range fam {
			if _, err := purges.Put(ctx, run, m); err != nil {
				return res, unavailable("mark %s: %v", run, err)
			}
			begin(run)
		}
		if o.afterStep != nil {
			if err := o.afterStep(fam[0], stepMarked); err != nil {
				return res, err
			}
		}
		for _, run := range fam {
			if err := rm.removeRun(ctx, run, byRun[run]); err != nil {
				return res, err
			}
			removed(run)
			res.Purged = append(res.Purged, run)
			if err := progress(run); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// startedFamilies groups the runs whose removal started (started) with
// the other runs the apply that started it chose: those its markers name
// (named) and, for an earlier release's marker that names none, the runs
// of its view family that apply's hold check took (took: purging set in
// weft_holds) — transitively. Nothing else: a run of the family that
// apply did not choose is decided again (Apply). A run with neither a view
// nor a marker is left out (nothing of it is stored to remove), a
// tombstoned run (marked, not started) too. Each family sorted, in the
// order of its first run.
func startedFamilies(started []string, named map[string][]string, views []projections.RunView, marked, took map[string]bool) [][]string {
	hasView := map[string]bool{}
	for _, v := range views {
		hasView[v.Run] = true
	}
	familyOf := map[string][]string{}
	for _, fam := range families(views) {
		for _, r := range fam {
			familyOf[r] = fam
		}
	}
	stored := func(run string) bool {
		if marked[run] {
			return slices.Contains(started, run) // else a tombstone
		}
		return hasView[run]
	}
	u := unionFind{}
	for _, run := range started {
		u.find(run)
		chosen := named[run]
		if len(chosen) == 0 {
			for _, r := range familyOf[run] {
				if took[r] {
					chosen = append(chosen, r)
				}
			}
		}
		for _, r := range chosen {
			if stored(r) {
				u.union(run, r)
			}
		}
	}
	return u.groups()
}

// heldOf is the first active hold (held) on a run of fam.
func heldOf(fam []string, held map[string]Hold) Hold {
	for _, run := range fam {
		if h := held[run]; h.Active() {
			return h
		}
	}
	return Hold{}
}

// interruptedHoldWhy is why run, of a family whose removal was
// interrupted, is kept: hold on a run of it.
func interruptedHoldWhy(run string, hold Hold) string {
	why := "its removal was interrupted and it is under a " + holdWhy(hold)
	if run != hold.Run {
		why = "its family's removal was interrupted and " + hold.Run + " is under a " + holdWhy(hold)
	}
	return why + ": the removal stops here and is completed once the hold is released (its read models may be gone: weft rebuild)"
}

// keepWhy says why v's run is kept on its own account ("" when it may go).
func keepWhy(v projections.RunView, cutoff time.Time, held map[string]Hold) string {
	switch {
	case held[v.Run].Active():
		return holdWhy(held[v.Run])
	case v.Status != projections.StatusFinished:
		return "unfinished (" + v.Status + ")"
	case len(v.Uncertain) > 0:
		return fmt.Sprintf("nobody knows the outcome of %v", v.Uncertain)
	case len(v.Questions) > 0:
		return fmt.Sprintf("open questions on %v", v.Questions)
	case !v.Updated.Before(cutoff):
		return "its last event (" + v.Updated.UTC().Format(time.RFC3339) + ") is newer than the cutoff"
	}
	return ""
}

func holdWhy(h Hold) string {
	return fmt.Sprintf("legal hold by %s since %s: %s", h.By, h.At.Format(time.RFC3339), h.Reason)
}

// remover removes runs (removeRun) for one Apply.
type remover struct {
	js     jetstream.JetStream
	purges jetstream.KeyValue
	// tasks are the sequences of the tasks queued in WEFT_TASKS, by run.
	tasks       map[string][]uint64
	now, cutoff time.Time
	after       func(run, step string) error
}

// removeRun removes run step by step (the order of the step constants);
// every step is idempotent, so a removal stopped anywhere is completed by
// running it again. v is run's view (zero when it is gone already). Its
// last step replaces the run's marker by its tombstone, kept for ever: a
// purged run's id is never used again (CheckNotPurged).
func (rm remover) removeRun(ctx context.Context, run string, v projections.RunView) error {
	js := rm.js
	step := func(name string, fns ...func() error) error {
		for _, fn := range fns {
			if err := fn(); err != nil {
				return fmt.Errorf("retention: remove %s (%s): %w", run, name, err)
			}
		}
		if rm.after != nil {
			return rm.after(run, name)
		}
		return nil
	}
	// The read models first, the view last of them: the index entries
	// are computed from it, and while it is there a reader still sees the
	// whole run.
	var readModels []func() error
	if v.Run != "" {
		for _, k := range projector.IndexKeys(v) {
			readModels = append(readModels, purgeSubject(ctx, js, protocol.IndexBucket, k))
		}
	}
	for _, b := range []string{protocol.ApprovalsBucket, protocol.UncertainBucket, protocol.QuestionsBucket} {
		readModels = append(readModels, purgeSubject(ctx, js, b, run+".*"))
	}
	readModels = append(readModels, purgeSubject(ctx, js, protocol.RunsBucket, run), purgeSubject(ctx, js, protocol.ViewsBucket, run))
	if err := step(stepReadModels, readModels...); err != nil {
		return err
	}
	if err := step(stepRuntime,
		purgeSubject(ctx, js, protocol.SnapshotsBucket, run),
		purgeSubject(ctx, js, protocol.ClaimsBucket, run+".>"),
		purgeSubject(ctx, js, protocol.DriversBucket, "*."+run),
		purgeStream(ctx, js, protocol.TimersStream, timer.SubjectArm+"."+run+".>"),
		purgeStream(ctx, js, protocol.TimersStream, timer.SubjectDue+"."+run),
		// Its tasks still queued (a run cancelled while its workers
		// were down): no worker runs or requeues them after the purge.
		deleteTasks(ctx, js, rm.tasks[run]),
	); err != nil {
		return err
	}
	// The events last: until they go, the run id is taken (no new run
	// starts under it), and a reader that finds no view can still export
	// the whole history.
	if err := step(stepEvents, purgeStream(ctx, js, protocol.EventsStream, eventlog.RunFilter(run))); err != nil {
		return err
	}
	return step(stepDone, func() error {
		done := rm.now
		m, _ := json.Marshal(marker{Started: rm.now, Cutoff: rm.cutoff, State: statePurged, Purged: &done})
		if _, err := rm.purges.Put(ctx, run, m); err != nil {
			return unavailable("the tombstone of %s: %v", run, err)
		}
		return nil
	})
}

// purgeSubject purges every value (and delete marker) of the keys of
// bucket matching key, a key or a filter with wildcards.
func purgeSubject(ctx context.Context, js jetstream.JetStream, bucket, key string) func() error {
	return purgeStream(ctx, js, "KV_"+bucket, "$KV."+bucket+"."+key)
}

func purgeKey(ctx context.Context, js jetstream.JetStream, bucket, key string) error {
	return purgeSubject(ctx, js, bucket, key)()
}

// purgeStream purges the messages of stream on subject (nothing when the
// deployment has no such stream).
func purgeStream(ctx context.Context, js jetstream.JetStream, stream, subject string) func() error {
	return func() error {
		st, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return unavailable("stream %s: %v", stream, err)
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return unavailable("purge %s of %s: %v", subject, stream, err)
		}
		return nil
	}
}

// Views returns every stored run view (weft_views), in one watch; none
// when the deployment has no views bucket.
func Views(ctx context.Context, js jetstream.JetStream) ([]projections.RunView, error) {
	kv, err := js.KeyValue(ctx, protocol.ViewsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("bucket %s: %v", protocol.ViewsBucket, err)
	}
	var out []projections.RunView
	err = eachValue(ctx, kv, func(key string, b []byte) error {
		v, err := projections.DecodeView(b)
		if err != nil {
			return fmt.Errorf("retention: the view of %s does not decode: %w", key, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// families groups the runs of views (and the runs they name) into
// families: runs joined by delegation (parent, children) or restart
// (forked from), transitively. Each family is sorted, and the families
// by their first run.
func families(views []projections.RunView) [][]string {
	u := unionFind{}
	for _, v := range views {
		u.find(v.Run)
		if v.Parent != nil {
			u.union(v.Run, v.Parent.Run)
		}
		for _, c := range v.Children {
			u.union(v.Run, c.Run)
		}
		if v.ForkedFrom != nil {
			u.union(v.Run, v.ForkedFrom.Run)
		}
	}
	return u.groups()
}

// unionFind is a disjoint-set forest of run ids: each run's parent in it
// (a root is its own).
type unionFind map[string]string

// find is r's root (r is added, a root, when new).
func (u unionFind) find(r string) string {
	p, ok := u[r]
	if !ok {
		u[r] = r
		return r
	}
	if p == r {
		return r
	}
	root := u.find(p)
	u[r] = root
	return root
}

// union joins a's set and b's (nothing when either is empty).
func (u unionFind) union(a, b string) {
	if a == "" || b == "" {
		return
	}
	if ra, rb := u.find(a), u.find(b); ra != rb {
		u[ra] = rb
	}
}

// groups are u's sets, each sorted, sorted by their first run.
func (u unionFind) groups() [][]string {
	groups := map[string][]string{}
	for r := range u {
		root := u.find(r)
		groups[root] = append(groups[root], r)
	}
	out := make([][]string, 0, len(groups))
	for _, g := range groups {
		slices.Sort(g)
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}
