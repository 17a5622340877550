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

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/backoff"
)

// rebuildBatch is how many runs' last log messages one request reads.
const rebuildBatch = 64

// rebuildDrivers gives every unfinished run in the log that is not idle
// (aggregate.Idle) and has no weft_drivers entry one, naming the driver
// its log records, so that the owner of its partition finds it
// (docs/semantics.md
// §8: which runs are unfinished and who drives them is derived from the
// log). It repairs what a start's intent cannot: a bucket that was lost or
// re-created, the entries of a release before partitions (keyed by the
// bare run id, which it deletes). It lists the log's run subjects (names
// and counts) and reads the last message of each run without an entry
// once — a cost in every run of the deployment, so it is made once per
// deployment: by a runner that finds no "rebuilt" key in weft_partitions
// (a new deployment, a lost bucket, an upgrade), which puts it when done:
// only when every unfinished run was handled (rebuildLoop makes it again
// otherwise).
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
	var unfinished []string
	for chunk := range slices.Chunk(candidates, rebuildBatch) {
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, r.js, eventlog.Stream, chunk)
		if err != nil {
			return 0, fmt.Errorf("read last messages: %w", err)
		}
		for m, err := range msgs {
			if err != nil {
				return 0, fmt.Errorf("read last messages: %w", err)
			}
			if !endsFinished(m.Data) {
				unfinished = append(unfinished, strings.TrimSuffix(strings.TrimPrefix(m.Subject, eventlog.SubjectPrefix), ".events"))
			}
		}
	}
	n, left := 0, 0
	for _, run := range unfinished {
		s, _, err := r.load(ctx, run)
		if err != nil {
			if !r.noteQuarantine(err) { // a quarantined run is watched and woken once repaired
				r.log.Warn("rebuild driver key: load", "run", run, "err", err)
				left++
			}
			continue
		}
		if _, fin := s.Finished(); fin || !s.Exists() || aggregate.Idle(s) {
			continue
		}
		_, err = r.createDriverKey(ctx, run, s.Runner())
		switch {
		case err == nil:
			r.log.Info("rebuilt the driver key of an unfinished run from its log", "run", run, "driver", s.Runner())
			n++
		case errors.Is(err, errDriverKeyExists): // put meanwhile by its driver
		default:
			r.log.Warn("rebuild driver key: create", "run", run, "err", err)
			left++
		}
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
		return n, fmt.Errorf("%d of %d unfinished runs not handled (%d entries rebuilt)", left, len(unfinished), n)
	}
	if _, err := r.partKV.Put(ctx, rebuiltKey, []byte(fmt.Sprintf(`{"schema":1,"runs":%d}`, n))); err != nil {
		return n, fmt.Errorf("put %s key %s: %w", PartitionsBucket, rebuiltKey, err)
	}
	return n, nil
}

// endsFinished reports whether a log message (docs/protocol/10-log.md:
// {"schema":1,"events":[<envelope>,...]}) ends with run_finished, or with
// a finished run's signed end head (head_signed with end). An unreadable
// message counts as unfinished (the run is then read whole).
func endsFinished(data []byte) bool {
	var b struct {
		Events []struct {
			Type    events.Name `json:"type"`
			Payload struct {
				End bool `json:"end"`
			} `json:"payload"`
		} `json:"events"`
	}
	if json.Unmarshal(data, &b) != nil || len(b.Events) == 0 {
		return false
	}
	last := b.Events[len(b.Events)-1]
	return last.Type == events.NameRunFinished || last.Type == events.NameHeadSigned && last.Payload.End
}

// rebuildLoop makes rebuildDrivers until it is done (every unfinished run
// handled, "rebuilt" put) or ctx ends, with a bounded backoff between
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
