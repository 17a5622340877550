package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Kind is what a loaded run is doing when the loader leaves it.
type Kind int

// The kinds of loaded runs.
const (
	// Suspended runs asked for an approval of their one tool call: start,
	// model turn 1, its reply with one call of "step", the call resolved
	// (policy: approval required). Three decisions.
	Suspended Kind = iota
	// Finished runs completed: a suspended run's three decisions, then the
	// approval, the step's report and turn 2's final answer. Six.
	Finished
	// Active runs have a model call in flight: only the start (run
	// started, turn 1 requested). Their runner (the loader's runner id)
	// is gone, so they wait for a takeover.
	Active
)

// String returns the kind's name as the harness prints it.
func (k Kind) String() string {
	switch k {
	case Suspended:
		return "suspended"
	case Finished:
		return "finished"
	case Active:
		return "active"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// steps is how many decisions the loader appends for a run of kind k.
func (k Kind) steps() int {
	switch k {
	case Finished:
		return 6
	case Active:
		return 1
	}
	return 3
}

// KindOf is the kind of the i-th loaded run: of every 100, one is active
// (i%100 == 0), 29 are finished (1..29) and 70 suspended.
func KindOf(i int) Kind {
	switch m := i % 100; {
	case m == 0:
		return Active
	case m < 30:
		return Finished
	}
	return Suspended
}

// RunID is the id of the i-th run the loader writes with prefix.
func RunID(prefix string, i int) string { return fmt.Sprintf("%s-%07d", prefix, i) }

// LoadConfig says what Load writes.
type LoadConfig struct {
	// Runs is how many runs: RunID(Prefix, 0 .. Runs-1), of KindOf(i).
	Runs int
	// Prefix prefixes the run ids ("scale" when empty).
	Prefix string
	// Runner is the runner id recorded as the runs' driver: a loader
	// runner that never heartbeats, so it is gone ("scale-loader" when
	// empty).
	Runner string
	// Window is how many runs are loaded side by side, one decision per
	// run per batch (2048 when 0).
	Window int
	// Progress receives a line every few seconds (nil: none).
	Progress io.Writer
	// Index, when set, is called with each Active run once its start is
	// in the log: it writes whatever index a runner's takeover finds
	// active runs by (the runner writes it before its first append).
	Index func(ctx context.Context, run string) error
}

// LoadResult is what Load wrote.
type LoadResult struct {
	// Runs by kind, as left in the log (including runs found there).
	Suspended, Finished, Active int
	// Existing is how many runs were already (wholly or partly) in the
	// log: Load continued them instead of starting them again.
	Existing int
	// Messages is how many log messages (decisions) Load appended.
	Messages int
	// Elapsed is how long it took.
	Elapsed time.Duration
}

// Rate is the runs loaded per second.
func (r LoadResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Suspended+r.Finished+r.Active) / r.Elapsed.Seconds()
}

// Load appends cfg.Runs runs to the log on js, deciding every event with
// the real decision core (aggregate.Decide on the commands a runner would
// decide: the start, the model's replies, the calls' validation and
// policy, an approval, the tool's report) and stamping them as a runner
// does (eventlog, recorded time = the decision's time), with the recorded
// driver cfg.Runner. Decisions go out with eventlog.AppendBatch, a window
// of runs at a time. It is idempotent by run id: a run already in the log
// (a start refused as a conflict) is read back, folded, and continued from
// the step its history reached.
func Load(ctx context.Context, js jetstream.JetStream, cfg LoadConfig) (LoadResult, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "scale"
	}
	if cfg.Runner == "" {
		cfg.Runner = "scale-loader"
	}
	if cfg.Window <= 0 {
		cfg.Window = 2048
	}
	ag, err := Agent()
	if err != nil {
		return LoadResult{}, err
	}
	l := &loader{cfg: cfg, ag: ag, log: eventlog.New(js), start: time.Now()}
	l.lastProgress = l.start
	for lo := 0; lo < cfg.Runs; lo += cfg.Window {
		if err := l.window(ctx, lo, min(lo+cfg.Window, cfg.Runs)); err != nil {
			l.res.Elapsed = time.Since(l.start)
			return l.res, err
		}
		if cfg.Progress != nil && time.Since(l.lastProgress) >= 3*time.Second {
			l.lastProgress = time.Now()
			done := min(lo+cfg.Window, cfg.Runs)
			el := time.Since(l.start)
			fmt.Fprintf(cfg.Progress, "load: %d/%d runs (%.0f%%), %d messages, %.0f runs/s\n",
				done, cfg.Runs, 100*float64(done)/float64(cfg.Runs), l.res.Messages, float64(done)/el.Seconds())
		}
	}
	l.res.Elapsed = time.Since(l.start)
	return l.res, nil
}

type loader struct {
	cfg          LoadConfig
	ag           *agent.Agent
	log          *eventlog.Log
	res          LoadResult
	start        time.Time
	lastProgress time.Time
}

// loading is one run of a window.
type loading struct {
	id    string
	kind  Kind
	step  int
	state aggregate.State
	head  eventlog.Head
}

// window loads runs lo..hi-1: one batch per step, every run that has a
// step left taking part.
func (l *loader) window(ctx context.Context, lo, hi int) error {
	runs := make([]*loading, 0, hi-lo)
	for i := lo; i < hi; i++ {
		runs = append(runs, &loading{id: RunID(l.cfg.Prefix, i), kind: KindOf(i)})
	}
	for {
		var ds []eventlog.Decision
		var who []*loading
		now := time.Now()
		for _, r := range runs {
			if r.step >= r.kind.steps() {
				continue
			}
			c, err := l.command(ctx, r, now)
			if err != nil {
				return fmt.Errorf("load run %s step %d: %w", r.id, r.step, err)
			}
			evs, err := aggregate.Decide(r.state, c, now)
			if err != nil {
				return fmt.Errorf("load run %s step %d (%s): %w", r.id, r.step, c.CommandName(), err)
			}
			ds = append(ds, eventlog.Decision{Run: r.id, Head: r.head, At: now, Events: evs})
			who = append(who, r)
		}
		if len(ds) == 0 {
			break
		}
		out := l.log.AppendBatch(ctx, ds)
		for i, o := range out {
			r := who[i]
			var ce *eventlog.ConflictError
			switch {
			case o.Err == nil:
				if err := r.evolve(o.Envelopes); err != nil {
					return err
				}
				r.head = o.Head
				r.step++
				l.res.Messages++
				if r.step == r.kind.steps() && r.kind == Active && l.cfg.Index != nil {
					if err := l.cfg.Index(ctx, r.id); err != nil {
						return fmt.Errorf("load run %s: index: %w", r.id, err)
					}
				}
			case errors.As(o.Err, &ce) || errors.Is(o.Err, jetstream.ErrNoStreamResponse):
				// Someone (an earlier load) wrote the run: continue
				// from what its log says.
				if err := l.resume(ctx, r); err != nil {
					return err
				}
			default:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// The outcome is unknown (no acknowledgement): read it.
				if err := l.resume(ctx, r); err != nil {
					return fmt.Errorf("load run %s after %v: %w", r.id, o.Err, err)
				}
			}
		}
	}
	for _, r := range runs {
		switch r.kind {
		case Suspended:
			l.res.Suspended++
		case Finished:
			l.res.Finished++
		case Active:
			l.res.Active++
		}
	}
	return nil
}

func (r *loading) evolve(envs []events.Envelope) error {
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			return fmt.Errorf("load run %s: decode %s: %w", r.id, env.ID, err)
		}
		r.state = aggregate.Evolve(r.state, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return nil
}

// resume reads run r back from the log and finds the step its history
// reached: the loader's script decides the same number of events at every
// step, whatever the time, so the step is where the script's event count
// reaches the run's version.
func (l *loader) resume(ctx context.Context, r *loading) error {
	envs, head, err := l.log.Load(ctx, r.id)
	if err != nil {
		return fmt.Errorf("load run %s: read back: %w", r.id, err)
	}
	if r.step == 0 {
		l.res.Existing++
	}
	r.state, r.head, r.step = aggregate.State{}, head, 0
	if err := r.evolve(envs); err != nil {
		return err
	}
	var sim loading
	sim.id, sim.kind = r.id, r.kind
	now := time.Now()
	for sim.state.Version() < head.Version {
		if sim.step >= sim.kind.steps() {
			return fmt.Errorf("load run %s: its log (version %d) is not the loader's script", r.id, head.Version)
		}
		c, err := l.command(ctx, &sim, now)
		if err != nil {
			return err
		}
		evs, err := aggregate.Decide(sim.state, c, now)
		if err != nil {
			return fmt.Errorf("load run %s: replay step %d: %w", r.id, sim.step, err)
		}
		for i, e := range evs {
			sim.state = aggregate.Evolve(sim.state, events.Recorded{Run: r.id, Version: sim.state.Version() + 1, At: now, Event: e})
			_ = i
		}
		sim.step++
	}
	if sim.state.Version() != head.Version {
		return fmt.Errorf("load run %s: its log (version %d) is not the loader's script", r.id, head.Version)
	}
	r.step = sim.step
	return nil
}

// command is the command a runner would decide at r's step, from r's state.
func (l *loader) command(ctx context.Context, r *loading, now time.Time) (aggregate.Command, error) {
	ag := l.ag
	w := aggregate.Pending(r.state)
	switch r.step {
	case 0:
		return aggregate.Start{Run: r.id, Agent: ag.Ref(), Input: input, Limits: ag.Limits(), Typed: ag.Typed(), Runner: l.cfg.Runner}, nil
	case 1, 5:
		if w.Model == nil {
			return nil, errors.New("no model call pending")
		}
		return runner.ReplyCommand(w.Model.Turn, reply(int(w.Model.Turn))), nil
	case 2:
		if w.Resolve == nil {
			return nil, errors.New("no calls to resolve")
		}
		out := aggregate.ResolveCalls{Turn: w.Resolve.Turn}
		for _, c := range w.Resolve.Calls {
			res := aggregate.Resolution{CallID: c.ID}
			var valid tools.Arguments
			res.Validation, res.Detail, valid = ag.ValidateCall(c.Name, c.Arguments)
			res.Normalized = valid.JSON
			if res.Validation == events.CallValid {
				dec, err := policy.Evaluate(ctx, ag.Policy(), policy.Action{Run: r.id, ActionID: aggregate.ActionID(w.Resolve.Turn, c.ID), Tool: c.Name, Arguments: res.Normalized, Decoded: valid.Decoded}, policyTimeout)
				if err != nil {
					return nil, fmt.Errorf("policy: %w", err)
				}
				res.Policy = runner.PolicyResult(dec, err)
				res.Tool, _ = ag.ToolConfig(c.Name)
			}
			out.Calls = append(out.Calls, res)
		}
		return out, nil
	case 3:
		id := aggregate.ActionID(1, "c1")
		a, ok := r.state.Action(id)
		if !ok {
			return nil, fmt.Errorf("no action %s", id)
		}
		pctx := policy.WithReview(ctx, policy.Review{Reviewer: "loader-reviewer", Verifier: ApproverName, Requirement: requirement, Revision: a.Request.Revision})
		dec, err := policy.Evaluate(pctx, ag.Policy(), policy.Action{Run: r.id, ActionID: id, Tool: a.Tool, Arguments: a.Arguments}, policyTimeout)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		cfg, _ := ag.ToolConfig(a.Tool)
		return aggregate.Approve{Action: id, Revision: a.Request.Revision, Reviewer: "loader-reviewer", Verifier: ApproverName, Policy: runner.PolicyResult(dec, err), Tool: cfg}, nil
	case 4:
		if len(w.Dispatch) == 0 {
			return nil, errors.New("no attempt to report")
		}
		d := w.Dispatch[0]
		content, _ := json.Marshal(stepOut{OK: true})
		return aggregate.Report{Action: d.Action, Attempt: d.Attempt, Outcome: events.OutcomeOutput, Content: content}, nil
	}
	return nil, fmt.Errorf("no step %d", r.step)
}

// policyTimeout bounds the loader's policy evaluations. The policy answers
// at once; the bound is long because a loader starved of CPU (a loaded
// machine, nice) must not record a policy_failed run: it fails instead.
const policyTimeout = time.Minute
