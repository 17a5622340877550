package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner"
)

// childDrain is the drain window of a bench subprocess's runner (Child).
const childDrain = time.Second

// recovery measures the availability budget (docs/reliability.md) with
// two runner subprocesses, started together as a deployment's would be:
// one is SIGKILLed while replayable bodies of its runs hang, and from the
// kill the bench measures until the survivor's first decision on each of
// those runs (run_recovered), until each finished there (the body
// replayed), and until the first start accepted in each partition the
// killed runner owned (a start answered runner_busy is tried again every
// 10 ms). Then a third subprocess joins, takes its share, and is
// SIGTERMed with bodies hanging on its partitions: from the signal, until
// the first start accepted in each of its partitions. Each figure is
// printed against the lease (SIGKILL) or the drain window (SIGTERM).
func (b *bencher) recovery(ctx context.Context) error {
	b.stopRuntime()
	w, err := b.newWatcher()
	if err != nil {
		return err
	}
	defer w.close()
	parts, err := b.srv.js.KeyValue(ctx, runner.PartitionsBucket)
	if err != nil {
		return err
	}
	stamp := time.Now().UnixNano()
	killed, survivor := fmt.Sprintf("bench-k-%d", stamp), fmt.Sprintf("bench-s-%d", stamp)
	n := pick(b, 32, 128)
	b.progress("recovery: runner subprocesses %s and %s, %d runs whose bodies hang on %s, which is SIGKILLed", killed, survivor, n, killed)
	k, err := b.spawn(ctx, killed, true)
	if err != nil {
		return err
	}
	defer k.kill()
	s, err := b.spawn(ctx, survivor, false)
	if err != nil {
		return err
	}
	defer s.term(30 * time.Second)
	own, np, err := settled(ctx, parts, killed, survivor)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("rec-%d", stamp%100000)
	res := b.clients(ctx, w, min(n, 16), time.Minute, (n+15)/16, agentRecover, "go", "attempt_fenced", prefix)
	if len(res.runs) == 0 {
		return fmt.Errorf("no run reached its fence: %v", res.lastErr)
	}
	// The runs of the killed runner's partitions whose body hangs in its
	// worker: the survivor's worker ran the others' bodies (one work
	// queue), and those runs finished.
	var mine []string
	decided, finished := map[string]<-chan time.Time{}, map[string]<-chan time.Time{}
	for _, r := range res.runs {
		if own[partition.Of(r, np)] == killed {
			decided[r], finished[r] = w.expect(r, "run_recovered"), w.expect(r, "run_finished")
		}
	}
	log := eventlog.New(b.srv.js)
	for r := range decided {
		envs, _, err := log.Load(ctx, r)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(envs, func(e events.Envelope) bool { return e.Type == events.NameRunFinished }) {
			delete(decided, r)
			delete(finished, r)
			continue
		}
		mine = append(mine, r)
	}
	if len(mine) == 0 {
		return fmt.Errorf("none of %d runs has a body hanging in %s", len(res.runs), killed)
	}
	var lost []int
	for p, o := range own {
		if o == killed {
			lost = append(lost, p)
		}
	}
	t0 := time.Now()
	k.kill()
	accepted := b.probe(ctx, w, t0, lost, np, fmt.Sprintf("pk-%d", stamp%100000))
	// A run whose body the survivor's worker ran may still have finished
	// on the killed runner before the SIGKILL: it is not counted.
	fin, unfinished := collect(finished, t0)
	for r, t := range fin {
		if t < 0 || !recovered(ctx, log, r) {
			// Finished before the SIGKILL, or finished by the killed
			// runner itself (no takeover in its log) and seen by the
			// watcher only after the kill on a loaded machine.
			delete(fin, r)
			delete(decided, r)
		}
	}
	dec, missing := collect(decided, t0)
	// The watcher may miss an event a loaded machine delivers late or
	// never (CI once: a run the log shows finished had neither event
	// from it). The log decides for those: finished without a takeover is
	// the killed runner's own end before the SIGKILL (not counted, as
	// above); a takeover or an end the log records is timed by its
	// recorded time.
	missing, unfinished = fromLog(ctx, log, t0, missing, unfinished, decided, finished, dec, fin)
	if len(missing)+len(unfinished) > 0 {
		st, _ := s.poll(ctx)
		return fmt.Errorf("a minute after the SIGKILL, %d of %d runs of the killed runner had no decision by the survivor (%v) and %d had not finished; the survivor owns %d partitions, took %d runs over and had %d internal refusals; %s",
			len(missing), len(mine), missing[:min(len(missing), 5)], len(unfinished), len(st.Stats.Partitions), st.Stats.TakenOver, st.Stats.InternalRefusals,
			b.strandedState(ctx, log, np, missing[:min(len(missing), 5)]))
	}
	kt, err := accepted()
	if err != nil {
		return err
	}
	lease := Row{Section: SectionRecovery, Baseline: "lease (configured)", BaseValue: msf(benchLease), BaseUnit: "ms", Unit: "ms"}
	b.percentiles(lease, "SIGKILL → survivor's first decision", slices.Collect(maps.Values(dec)),
		fmt.Sprintf("%d runs of the killed runner, from the SIGKILL until the survivor recorded run_recovered; budget p99 ≤ 1.5 × lease", len(dec)))
	b.percentiles(lease, "SIGKILL → first start accepted in its partitions", kt.accepted,
		fmt.Sprintf("%d partitions the killed runner owned, from the SIGKILL until a start of a new run there was accepted (a start answered runner_busy is sent again 10 ms after its answer); budget p99 ≤ 1.5 × lease", len(kt.accepted)))
	b.percentiles(lease, "after SIGKILL: a probe start, its send → its answer", kt.requests,
		fmt.Sprintf("%d starts the probe sent to those partitions, each from its send to its own answer (accepted, runner_busy, …; none resent before its answer came, up to %s)", len(kt.requests), probeWait))
	floor := Row{Section: SectionRecovery, Baseline: "lease + scan interval (configured)", BaseValue: msf(benchLease + benchLease/4), BaseUnit: "ms", Unit: "ms"}
	b.percentiles(floor, "recovery after SIGKILL", slices.Collect(maps.Values(fin)),
		fmt.Sprintf("%d runs, from the SIGKILL until each finished on the surviving runner (replayed body)", len(fin)))

	// SIGTERM: a third runner joins, takes its share, and drains.
	termed := fmt.Sprintf("bench-t-%d", stamp)
	b.progress("recovery: runner subprocess %s joins with bodies hanging on its partitions, and is SIGTERMed", termed)
	tc, err := b.spawn(ctx, termed, true)
	if err != nil {
		return err
	}
	defer tc.kill()
	own, _, err = settled(ctx, parts, termed, survivor)
	if err != nil {
		return err
	}
	var moving []int
	for p, o := range own {
		if o == termed {
			moving = append(moving, p)
		}
	}
	hung := b.clients(ctx, w, 8, time.Minute, pick(b, 2, 4), agentRecover, "go", "attempt_fenced", prefix+"-t")
	if len(hung.runs) == 0 {
		return fmt.Errorf("no run reached its fence before the SIGTERM: %v", hung.lastErr)
	}
	t1 := time.Now()
	tc.signal(syscall.SIGTERM)
	accepted = b.probe(ctx, w, t1, moving, np, fmt.Sprintf("pt-%d", stamp%100000))
	tc.term(time.Minute)
	tt, err := accepted()
	if err != nil {
		return err
	}
	drain := Row{Section: SectionRecovery, Baseline: "drain window (configured)", BaseValue: msf(childDrain), BaseUnit: "ms", Unit: "ms"}
	b.percentiles(drain, "SIGTERM → first start accepted in its partitions", tt.accepted,
		fmt.Sprintf("%d partitions the drained runner owned (%d runs with bodies hanging), from the SIGTERM until a start of a new run there was accepted (sent again as after the SIGKILL); budget: no runner_busy past the drain window", len(tt.accepted), len(hung.runs)))
	b.percentiles(drain, "after SIGTERM: a probe start, its send → its answer", tt.requests,
		fmt.Sprintf("%d starts the probe sent to those partitions, each from its send to its own answer (none resent before its answer came, up to %s): a command forwarded to the draining runner shows here", len(tt.requests), probeWait))
	return nil
}

// collect waits (up to a minute) for every channel of chs and returns the
// times from t0 by run, and the runs whose channel got nothing.
func collect(chs map[string]<-chan time.Time, t0 time.Time) (lat map[string]time.Duration, missing []string) {
	deadline := time.After(time.Minute)
	lat = map[string]time.Duration{}
	runs := slices.Sorted(maps.Keys(chs))
	for i, r := range runs {
		select {
		case t := <-chs[r]:
			lat[r] = t.Sub(t0)
		case <-deadline:
			for _, left := range runs[i:] {
				select {
				case t := <-chs[left]:
					lat[left] = t.Sub(t0)
				default:
					missing = append(missing, left)
				}
			}
			return lat, missing
		}
	}
	return lat, nil
}

// fromLog settles, from each run's log, the runs the watcher did not time:
// missing (no run_recovered seen) and unfinished (no run_finished seen). A
// run the log shows finished without a takeover ended on the killed runner
// before the SIGKILL: it leaves decided, finished and both lists. A
// takeover or an end the log records is put in dec or fin at its recorded
// time after t0. What the log does not show either stays in the lists.
func fromLog(ctx context.Context, log *eventlog.Log, t0 time.Time, missing, unfinished []string,
	decided, finished map[string]<-chan time.Time, dec, fin map[string]time.Duration) ([]string, []string) {
	type seen struct {
		recovered, finished *time.Time
	}
	read := map[string]seen{}
	look := func(r string) (seen, bool) {
		if s, ok := read[r]; ok {
			return s, true
		}
		envs, _, err := log.Load(ctx, r)
		if err != nil {
			return seen{}, false
		}
		var s seen
		for _, e := range envs {
			at := e.Recorded
			switch e.Type {
			case events.NameRunRecovered:
				if s.recovered == nil {
					s.recovered = &at
				}
			case events.NameRunFinished:
				s.finished = &at
			}
		}
		read[r] = s
		return s, true
	}
	keep := func(runs []string, pick func(seen) *time.Time, into map[string]time.Duration) []string {
		var left []string
		for _, r := range runs {
			s, ok := look(r)
			switch {
			case !ok:
				left = append(left, r)
			case s.finished != nil && s.recovered == nil:
				delete(decided, r)
				delete(finished, r)
				delete(dec, r)
				delete(fin, r)
			case pick(s) != nil:
				into[r] = pick(s).Sub(t0)
			default:
				left = append(left, r)
			}
		}
		return left
	}
	missing = keep(missing, func(s seen) *time.Time { return s.recovered }, dec)
	unfinished = keep(unfinished, func(s seen) *time.Time { return s.finished }, fin)
	return missing, unfinished
}

// recovered reports whether run's log records a takeover (run_recovered);
// a log that cannot be read counts as recorded, so that the run is
// measured.
func recovered(ctx context.Context, log *eventlog.Log, run string) bool {
	envs, _, err := log.Load(ctx, run)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(envs, func(e events.Envelope) bool { return e.Type == events.NameRunRecovered })
}

// percentiles adds the p50, p99 and max of lat as rows like base.
func (b *bencher) percentiles(base Row, name string, lat []time.Duration, note string) {
	slices.Sort(lat)
	for _, p := range []int{50, 99, 100} {
		r := base
		r.Name, r.Value = fmt.Sprintf("%s p%d", name, p), msf(pct(lat, p))
		switch p {
		case 50:
			r.Note = note
		case 100:
			r.Name = name + " max"
		}
		b.add(r)
	}
}

// probeWait is how long a probe's start waits for its answer before it
// counts it as none and sends another: longer than a forwarded command's
// own bound (twice the command timeout), so that every request's time is
// its own, from its send to its answer — a slow forwarded command shows
// in it instead of being hidden by an earlier resend.
const probeWait = 30 * time.Second

// probeTimes is what a probe measured: per partition, the time from the
// signal to the first start accepted there; per request sent, the time
// from its send to its answer (whatever it answered).
type probeTimes struct {
	accepted, requests []time.Duration
}

// probe starts, for each partition of parts, runs of agentApprove (they
// stay suspended) whose ids fall in it until one is accepted, from now
// on, and returns a function that waits for them (probeTimes).
func (b *bencher) probe(ctx context.Context, w *watcher, t0 time.Time, parts []int, np int, prefix string) func() (probeTimes, error) {
	c := api.NewClient(w.nc)
	var (
		mu   sync.Mutex
		out  probeTimes
		errs []error
		wg   sync.WaitGroup
	)
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := t0.Add(time.Minute)
			for i := 0; ; i++ {
				id := probeID(prefix, p, np, i)
				sctx, cancel := context.WithTimeout(ctx, probeWait)
				sent := time.Now()
				_, err := c.Start(sctx, api.StartRequest{Run: id, Agent: agentApprove, Input: "probe"})
				cancel()
				now := time.Now()
				mu.Lock()
				out.requests = append(out.requests, now.Sub(sent))
				mu.Unlock()
				if err == nil {
					mu.Lock()
					out.accepted = append(out.accepted, now.Sub(t0))
					mu.Unlock()
					return
				}
				if now.After(deadline) || ctx.Err() != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("partition %d: no start accepted a minute after the signal: %w", p, err))
					mu.Unlock()
					return
				}
				// Sent again: a retryable answer, outcome_unknown or no
				// answer in time.
				if code := weft.ErrorCode(err); !code.Retryable() && code != weft.CodeOutcomeUnknown {
					if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
						mu.Lock()
						errs = append(errs, fmt.Errorf("partition %d: start: %w", p, err))
						mu.Unlock()
						return
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return func() (probeTimes, error) {
		wg.Wait()
		return out, errors.Join(errs...)
	}
}

// probeID is the i-th run id under prefix that falls in partition p of np.
func probeID(prefix string, p, np, i int) string {
	for j := 0; ; j++ {
		id := prefix + "-" + strconv.Itoa(p) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
		if partition.Of(id, np) == p {
			return id
		}
	}
}

// settled waits (up to a minute) until weft_partitions assigns every
// partition as partition.Owner does among ids, and returns the owners and
// the deployment's number of partitions.
func settled(ctx context.Context, kv jetstream.KeyValue, ids ...string) (map[int]string, int, error) {
	sorted := slices.Sorted(slices.Values(ids))
	deadline := time.Now().Add(time.Minute)
	for {
		own, np, err := owners(ctx, kv)
		if err != nil {
			return nil, 0, err
		}
		ok := np > 0
		for p := range np {
			if own[p] != partition.Owner(p, sorted) {
				ok = false
				break
			}
		}
		if ok {
			return own, np, nil
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("the partitions were not assigned among %v within a minute", ids)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// owners reads weft_partitions: partition → owner, and the number of
// partitions (its config key).
func owners(ctx context.Context, kv jetstream.KeyValue) (map[int]string, int, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = w.Stop() }()
	own, np := map[int]string{}, 0
	for e := range w.Updates() {
		if e == nil {
			return own, np, nil
		}
		if e.Key() == "config" {
			var c struct {
				Partitions int `json:"partitions"`
			}
			if json.Unmarshal(e.Value(), &c) == nil {
				np = c.Partitions
			}
			continue
		}
		if p, err := strconv.Atoi(strings.TrimPrefix(e.Key(), "p.")); err == nil && strings.HasPrefix(e.Key(), "p.") {
			own[p] = string(e.Value())
		}
	}
	return nil, 0, errors.New("the watch of weft_partitions ended")
}

// strandedState says, for runs no runner took over, what would tell why:
// each one's last event and whether its weft_drivers entry (the mark the
// owner of its partition scans for) is there and whose it is.
func (b *bencher) strandedState(ctx context.Context, log *eventlog.Log, np int, runs []string) string {
	drivers, err := b.srv.js.KeyValue(ctx, runner.DriversBucket)
	if err != nil {
		return fmt.Sprintf("weft_drivers: %v", err)
	}
	var out []string
	for _, r := range runs {
		last := "no event"
		if envs, h, err := log.Last(ctx, r); err != nil {
			last = err.Error()
		} else if len(envs) > 0 {
			last = fmt.Sprintf("version %d %s", h.Version, envs[len(envs)-1].Type)
		}
		entry := "no driver entry"
		if e, err := drivers.Get(ctx, runner.DriverKey(r, np)); err == nil {
			entry = fmt.Sprintf("driver entry %q (revision %d)", e.Value(), e.Revision())
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			entry = fmt.Sprintf("driver entry: %v", err)
		}
		out = append(out, fmt.Sprintf("%s: last %s, %s", r, last, entry))
	}
	return strings.Join(out, "; ")
}
