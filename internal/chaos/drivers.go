package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/runner"
)

// checkDriverLeft is the check that weft_drivers holds only runs with work
// in flight (docs/semantics.md §8; docs/protocol/40-commands.md,
// weft_drivers): an entry of a run that finished, or that is suspended
// with nothing in flight (aggregate.Idle), or that does not exist.
const checkDriverLeft = "driver_entry_left"

// driverLeftover is one weft_drivers entry of a run that should have none.
type driverLeftover struct {
	key, driver string
	rev         uint64
	run, why    string
	last        []events.Envelope // the run's last events, oldest first
}

// driverGrace is how long checkDrivers waits for the entries of ended
// runs to go: a removal follows the run's last append, and an entry left
// behind is removed by the owner's full scan of its partitions, every 8
// leases (32 ticks of a quarter lease); a few of those.
func (h *harness) driverGrace() time.Duration { return max(30*time.Second, 30*h.cfg.Lease) }

// checkDrivers runs once the workload is done and before the runners are
// stopped: every run finished (or waits only for a person), so that
// within driverGrace weft_drivers must hold no entry of any of them.
// Each entry left is a violation that names its key, the driver it names
// and the run's last events.
func (h *harness) checkDrivers(ctx context.Context) {
	deadline := time.Now().Add(h.driverGrace())
	for {
		left, err := h.driverLeftovers(ctx)
		if err == nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				h.violate(Violation{Check: checkDriverLeft, Detail: fmt.Sprintf("cannot read %s: %v", runner.DriversBucket, err)})
				return
			}
			for _, l := range left {
				h.violate(Violation{Check: checkDriverLeft, Run: l.run, Detail: fmt.Sprintf("%s %s still holds key %q (driver %q, revision %d) %s after the workload ended; last events: %s",
					l.why, runner.DriversBucket, l.key, l.driver, l.rev, h.driverGrace(), describeLast(l.last))})
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// driverLeftovers lists the weft_drivers entries of runs with nothing in
// flight, by key. An entry of a run with work in flight is not one (a run
// left so is the run_not_finished check's).
func (h *harness) driverLeftovers(ctx context.Context) ([]driverLeftover, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(lctx, runner.DriversBucket)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(lctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var entries []jetstream.KeyValueEntry
	for done := false; !done; {
		select {
		case <-lctx.Done():
			return nil, lctx.Err()
		case e := <-w.Updates():
			if e == nil {
				done = true
			} else if e.Operation() == jetstream.KeyValuePut {
				entries = append(entries, e)
			}
		}
	}
	var out []driverLeftover
	for _, e := range entries {
		l := driverLeftover{key: e.Key(), driver: string(e.Value()), rev: e.Revision()}
		_, run, ok := strings.Cut(e.Key(), ".")
		if !ok {
			l.why = "a key of the format before partitions (the bare run id):"
			out = append(out, l)
			continue
		}
		l.run = run
		envs, _, err := h.evlog.Load(lctx, run)
		if err != nil {
			return nil, fmt.Errorf("load run %s: %w", run, err)
		}
		l.last = envs[max(len(envs)-6, 0):]
		st, err := h.fold(lctx, run)
		if err != nil {
			return nil, fmt.Errorf("fold run %s: %w", run, err)
		}
		switch o, finished := st.Finished(); {
		case len(envs) == 0:
			l.why = "the run does not exist, yet"
		case finished:
			l.why = fmt.Sprintf("the run finished (%s), yet", o.Kind)
		case aggregate.Idle(st):
			l.why = "the run is suspended with nothing in flight, yet"
		default:
			continue // work in flight: its entry is due
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

// describeLast prints events as "v<version> <type> <recorded time>", comma-separated.
func describeLast(envs []events.Envelope) string {
	if len(envs) == 0 {
		return "none"
	}
	parts := make([]string, len(envs))
	for i, e := range envs {
		parts[i] = fmt.Sprintf("v%d %s %s", e.Version, e.Type, e.Recorded.UTC().Format("15:04:05.000"))
	}
	return strings.Join(parts, ", ")
}
