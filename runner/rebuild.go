package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// rebuildBatch is how many runs' last log messages one request reads.
const rebuildBatch = 64

// rebuildDrivers gives every unfinished run in the log that has no
// weft_drivers key one, naming the driver its log records, so that the
// scan finds it (SEMANTICS §8: which runs are unfinished and who drives
// them is derived from the log). It repairs what a start's intent cannot:
// a bucket that was lost or re-created, a run stranded by an older release
// that put the key only after the append. It lists the log's run subjects
// (names and counts) and reads the last message of each run without a key
// once; a runner runs it at startup.
func (r *Runner) rebuildDrivers(ctx context.Context) (int, error) {
	keys := map[string]bool{}
	lister, err := r.drivers.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, fmt.Errorf("list %s: %w", DriversBucket, err)
	}
	if err == nil {
		for k := range lister.Keys() {
			keys[k] = true
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
	n := 0
	for _, run := range unfinished {
		s, _, err := r.load(ctx, run)
		if err != nil {
			if !r.noteQuarantine(err) { // a quarantined run is watched and woken once repaired
				r.log.Warn("rebuild driver key: load", "run", run, "err", err)
			}
			continue
		}
		if _, fin := s.Finished(); fin || !s.Exists() {
			continue
		}
		if _, err := r.drivers.Create(ctx, run, []byte(s.Runner())); err == nil {
			r.log.Info("rebuilt the driver key of an unfinished run from its log", "run", run, "driver", s.Runner())
			n++
		}
	}
	return n, nil
}

// endsFinished reports whether a log message (docs/protocol/10-log.md:
// {"schema":1,"events":[<envelope>,...]}) ends with run_finished. An
// unreadable message counts as unfinished (the run is then read whole).
func endsFinished(data []byte) bool {
	var b struct {
		Events []struct {
			Type events.Name `json:"type"`
		} `json:"events"`
	}
	if json.Unmarshal(data, &b) != nil || len(b.Events) == 0 {
		return false
	}
	return b.Events[len(b.Events)-1].Type == events.NameRunFinished
}
