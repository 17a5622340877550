package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/backoff"
)

// rebuildBatch is how many runs' last log messages one request reads.
const rebuildBatch = 64

// rebuildDrivers gives every run in the log that needs a driver and has
// no weft_drivers entry one, so that the owner of its partition finds it
// and wakes it: takes it over, or signs what is owed (signBehind). A run
// needs one unless it rests without a driver (restsWithoutDriver):
// unfinished and not idle — or, when this runner signs heads, owing a
// signature: an idle run whose person's decision is not signed yet, or a
// finished run whose end (or what was appended after it) is not, as its
// driver keeps the entry until it is signed (docs/semantics.md §8: which
// runs are unfinished and who drives them is derived from the log; what
// was not recorded is derived again, never dropped). The entry names the
// driver the log records; that of a finished run names this runner. It
// repairs what a start's intent cannot: a bucket that was lost or
// re-created, the entries of a release before partitions (keyed by the
// bare run id, which it deletes). It lists the log's run subjects (names
// and counts) and reads the last message of each run without an entry
// once; a run whose last message is not the end of a finished run
// (endsFinished) is loaded (load: its snapshot and the log after it, or
// its whole history). That is a cost in every run of the
// deployment, so it is made once per deployment: by a runner that finds
// no "rebuilt" key in weft_partitions (a new deployment, a lost bucket,
// an upgrade from the release before partitions), which puts it when
// done: only when every run that needs a driver was handled (rebuildLoop
// makes it again otherwise).
//
// With a head key it also gives an entry to every run whose last message
// is run_finished — the runs a runner without a key finished too: without
// loading it (that message proves the end head owed), and after the runs
// loaded, so that the runs with work in flight get theirs first.
// Whether such an end is then signed is the partition owner's to decide,
// not this runner's: its wake of the finished run signs it when it holds
// a key, and removes the entry either way (wakeLocked). A rebuild made by
// a runner without a key gives these runs no entry, whatever the owners
// hold (docs/adr/0026-signed-heads.md, "Cost").
func (r *Runner) rebuildDrivers(ctx context.Context) (int, error) {
	if _, err := r.partKV.Get(ctx, rebuiltKey); err == nil {
		return 0, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("read %s key %s: %w", PartitionsBucket, rebuiltKey, err)
	}
	r.testHook("rebuild", -1, "")
	keys := map[string]bool{}
	var old []string
	lister, err := r.drivers.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, fmt.Errorf("list %s: %w", DriversBucket, err)
	}
	if err == nil {
		for k := range lister.Keys() {
			if run := runOfDriverKey(k); run != "" {
				keys[run] = true
			} else {
				old = append(old, k)
			}
		}
	}
	st, err := r.js.Stream(ctx, eventlog.Stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(eventlog.Subject("*")))
	if err != nil {
		return 0, fmt.Errorf("list runs: %w", err)
	}
	var candidates []string
	for subj := range info.State.Subjects {
		run := strings.TrimSuffix(strings.TrimPrefix(subj, eventlog.SubjectPrefix), ".events")
		if !keys[run] {
			candidates = append(candidates, subj)
		}
	}
	slices.Sort(candidates)
	// The runs to load (their last message does not tell), and — for a
	// runner that signs heads — the finished runs whose last message is
	// run_finished: their end head is owed, which that message alone
	// proves (restsWithoutDriver), and a finished run's entry is only
	// woken, never read for its driver (acquireFromLog, wakeLocked), so
	// they get one without a load, after every run that may have work in
	// flight.
	var toRead, endOwed []string
	for chunk := range slices.Chunk(candidates, rebuildBatch) {
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, r.js, eventlog.Stream, chunk)
		if err != nil {
			return 0, fmt.Errorf("read last messages: %w", err)
		}
		for m, err := range msgs {
			if err != nil {
				return 0, fmt.Errorf("read last messages: %w", err)
			}
			run := strings.TrimSuffix(strings.TrimPrefix(m.Subject, eventlog.SubjectPrefix), ".events")
			switch fin, signed := endsFinished(m.Data); {
			case !fin:
				toRead = append(toRead, run)
			case !signed && r.headKey != nil:
				endOwed = append(endOwed, run)
			}
		}
	}
	n, left := 0, 0
	create := func(run, driver string) {
		_, err := r.createDriverKey(ctx, run, driver)
		switch {
		case err == nil:
			r.testHook("rebuild-entry", -1, run)
			r.log.Info("rebuilt the driver key of a run from its log", "run", run, "driver", driver)
			n++
		case errors.Is(err, errDriverKeyExists): // put meanwhile by its driver
		default:
			r.log.Warn("rebuild driver key: create", "run", run, "err", err)
			left++
		}
	}
	for _, run := range toRead {
		r.testHook("rebuild-read", -1, run)
		s, _, err := r.load(ctx, run)
		if err != nil {
			if !r.noteQuarantine(err) { // a quarantined run is watched and woken once repaired
				r.log.Warn("rebuild driver key: load", "run", run, "err", err)
				left++
			}
			continue
		}
		if r.restsWithoutDriver(s) {
			continue
		}
		create(run, s.Runner())
	}
	for _, run := range endOwed {
		// Named after this runner: the log's driver is not read, and the
		// partition's owner signs and removes the entry of a finished
		// run whoever it names.
		create(run, r.id)
	}
	for _, k := range old {
		if err := r.drivers.Purge(ctx, k); err != nil {
			r.log.Warn("rebuild driver key: purge the key of a release before partitions", "key", k, "err", err)
			left++
		}
	}
	if left > 0 {
		// Not done: the runs left have no entry yet (no scan finds
		// them). Made again later (rebuildLoop); "rebuilt" is not put.
		return n, fmt.Errorf("%d of %d runs not handled (%d entries rebuilt)", left, len(toRead)+len(endOwed), n)
	}
	if _, err := r.partKV.Put(ctx, rebuiltKey, []byte(fmt.Sprintf(`{"schema":1,"runs":%d}`, n))); err != nil {
		return n, fmt.Errorf("put %s key %s: %w", PartitionsBucket, rebuiltKey, err)
	}
	return n, nil
}

// endsFinished reports whether a log message (docs/protocol/10-log.md:
// {"schema":1,"events":[<envelope>,...]}) is the last of a finished run:
// one that ends with run_finished (signed false: its end head is owed
// when its runner signs heads, docs/adr/0026-signed-heads.md — its
// driver died between the two appends, or it signs nothing), or with the
// run's signed end head (head_signed with end: signed true). An
// unreadable message counts as unfinished (the run is then read whole).
func endsFinished(data []byte) (fin, signed bool) {
	var b struct {
		Events []struct {
			Type    events.Name `json:"type"`
			Payload struct {
				End bool `json:"end"`
			} `json:"payload"`
		} `json:"events"`
	}
	if json.Unmarshal(data, &b) != nil || len(b.Events) == 0 {
		return false, false
	}
	last := b.Events[len(b.Events)-1]
	if last.Type == events.NameHeadSigned && last.Payload.End {
		return true, true
	}
	return last.Type == events.NameRunFinished, false
}

// rebuildLoop makes rebuildDrivers until it is done (every run that needs
// a driver handled, "rebuilt" put) or ctx ends, with a bounded backoff between
// attempts, logging each attempt that left runs without an entry.
func (r *Runner) rebuildLoop(ctx context.Context) {
	back := backoff.New(time.Second, time.Minute)
	for attempt := 1; ; attempt++ {
		n, err := r.rebuildDrivers(ctx)
		if err == nil {
			if n > 0 {
				r.log.Info("rebuilt driver keys from the log", "runs", n, "attempts", attempt)
				// The owners scan their partitions again at once for
				// the entries rebuilt.
				r.own.ScanAll()
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("rebuild driver keys from the log", "err", err, "attempt", attempt, "rebuilt", n)
		if back.Wait(ctx) != nil {
			return
		}
	}
}
