package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/telemetry"
)

var _ api.Backend = (*Runner)(nil)

// current reports whether rn's state is the log's: the run's head in the
// log (one direct get of its last message) is the one rn holds. When it is
// not, rn is brought up to date (refresh), and dropped if another runner
// drives the run now.
func (r *Runner) current(ctx context.Context, rn *run) (bool, error) {
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := r.evlog.Head(hctx, rn.id)
	if err != nil {
		return false, err
	}
	if h == rn.head {
		return true, nil
	}
	rn.stale = true
	if !r.refresh(ctx, rn) && rn.driven && rn.stale {
		return false, fmt.Errorf("run %s moved on from version %d and could not be read", rn.id, rn.head.Version)
	}
	return false, nil
}

// commandTimeout is the largest command timeout of the served agents.
func (r *Runner) commandTimeout() time.Duration {
	d := time.Duration(0)
	for _, a := range r.list {
		if c, ok := a.Limits().CommandTimeout.Duration(); ok && c > d {
			d = c
		}
	}
	if d == 0 {
		d = 5 * time.Second
	}
	return d
}

func (r *Runner) reply(rn *run) api.Reply {
	return api.Reply{Schema: api.Schema, Run: rn.id, Status: string(aggregate.Status(rn.state).Kind)}
}

// start starts a run; parent links a child run to its delegation (nil for
// a run started through the API).
func (r *Runner) start(ctx context.Context, req api.StartRequest, parent *events.Parent) (api.StartReply, error) {
	return r.startFork(ctx, req, parent, nil)
}

// startFork is start; fork, when set, is the restart the run records
// after its run_started (runner/restart.go).
func (r *Runner) startFork(ctx context.Context, req api.StartRequest, parent *events.Parent, fork *events.RunForked) (api.StartReply, error) {
	id := req.Run
	if id == "" {
		id = r.newRunID()
	}
	if err := eventlog.CheckRun(id); err != nil {
		return api.StartReply{}, err
	}
	ag, ok := r.agents[req.Agent]
	if req.Version != "" {
		ag, ok = r.agents[req.Agent+"@"+req.Version]
	}
	if !ok {
		return api.StartReply{}, &weft.Error{Code: weft.CodeUnknownAgent, Message: r.unknownAgent(req.Agent, req.Version)}
	}
	// Only the owner of the run's partition starts it: forwarded there at
	// once, before anything is read (after a reconnection, once the owned
	// partitions are verified). The start counts as an acquisition in
	// flight (a release of the partition waits for it).
	done, err := r.acquiring(ctx, id)
	defer done()
	if err != nil {
		return api.StartReply{}, err
	}
	if err := r.owns(id); err != nil {
		done()
		var fe *forwardError
		if !errors.As(err, &fe) {
			return api.StartReply{}, err
		}
		req.Run = id
		var out api.StartReply
		// A restart travels under its own kind: a runner of an earlier
		// release refuses it (unknown forwarded command) instead of
		// starting the run fresh without its fork.
		kind := api.EndpointStart
		if fork != nil {
			kind = api.EndpointRestart
		}
		return out, r.forward(ctx, fe.driver, kind, id, forwardedStart{Request: req, Parent: parent, Fork: fork}, &out)
	}
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		return api.StartReply{}, errDraining
	}
	s, head, at, err := r.loadAt(ctx, id)
	if err != nil {
		if r.noteQuarantine(err) {
			return api.StartReply{}, err
		}
		return api.StartReply{}, &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
	}
	if !s.Exists() {
		// A new id only: one direct get, refused already_started when
		// retention purged a run of that id (never used again).
		if err := retention.CheckNotPurged(ctx, r.js, id); err != nil {
			return api.StartReply{}, err
		}
	}
	rn := newRun(id, s, head, ag)
	rn.lastAt = at
	_ = rn.lock(ctx)
	defer rn.unlock()
	// Register the run (locked) before its first append, so that a command
	// for it arriving right after the append waits for this start instead
	// of finding a run "driven by us but not in memory" and recovering it.
	registered, started := false, false
	if !s.Exists() {
		r.mu.Lock()
		draining := r.draining
		if _, ok := r.runs[id]; !ok && !draining {
			r.runs[id], registered = rn, true
		}
		r.mu.Unlock()
		if draining {
			return api.StartReply{}, errDraining
		}
	}
	defer func() { // runs before the unlock
		if registered && !started {
			r.mu.Lock()
			if r.runs[id] == rn {
				delete(r.runs, id)
			}
			r.mu.Unlock()
		}
	}()
	cmd := aggregate.Start{Run: id, Agent: ag.Ref(), Input: req.Input, Correlation: req.Correlation, Limits: ag.Limits(), Typed: ag.Typed(), Runner: r.id, Parent: parent, Fork: fork}
	ctx, span := r.tel.StartRun(ctx, id, ag.Name())
	defer span.End()
	// The driver is written as an intent before the run's first event, so
	// that a crash right after the append leaves no run that no runner
	// knows to recover (docs/semantics.md §8). An entry that exists already is
	// another start's intent (or a stale one): it is corrected once the
	// log says who won.
	intent := uint64(0)
	if !s.Exists() {
		rev, err := r.createDriverKey(ctx, id, r.id)
		switch {
		case err == nil:
			intent = rev
		case errors.Is(err, errDriverKeyExists):
		default:
			return api.StartReply{}, &weft.Error{Code: weft.CodeUnavailable, Message: "driver intent: " + err.Error()}
		}
	}
	// A new run's decision goes to the log now: the start's lane takes
	// the next request meanwhile (api.ReleaseLane; the reply is sent when
	// this returns, once). A start of a run that exists is refused
	// already_started by the decision, with no append: it keeps its lane,
	// so that its error is counted in the service's stats.
	if !s.Exists() {
		api.ReleaseLane(ctx)
	}
	evs, err := r.decideAppend(ctx, rn, cmd)
	if err != nil {
		if rn.stale && registered {
			// The append's outcome is unknown: the run may exist, driven by
			// us. It stays registered; act re-reads it and either drives
			// it or forgets it (refresh).
			rn.driven, started = true, true
			rn.keyed, rn.keyRev = intent != 0, intent
			r.retryLater(id)
			return api.StartReply{}, err
		}
		var conflict *eventlog.ConflictError
		if errors.As(err, &conflict) {
			// Someone started it at the same moment: judge against theirs.
			s, _, lerr := r.load(ctx, id)
			if lerr == nil {
				if _, err = aggregate.Decide(s, cmd, r.clock(rn)); err == nil {
					// The log refused the append, yet what it holds
					// would take the start: never an empty success.
					err = &weft.Error{Code: weft.CodeInternal, Message: "start conflicted with a log that holds no start: " + conflict.Error()}
				}
				if intent != 0 {
					r.correctDriver(id, s)
				}
			}
		} else if intent != 0 {
			r.deleteDriver(id, intent) // nothing landed
		}
		return api.StartReply{}, err
	}
	if len(evs) == 0 {
		return api.StartReply{}, &weft.Error{Code: weft.CodeInternal, Message: "start decided nothing"}
	}
	r.testHook("start-appended", -1, id)
	rn.driven, started = true, true
	rn.keyed, rn.keyRev = intent != 0, intent // else act puts the key
	r.mu.Lock()
	r.runs[id] = rn
	r.mu.Unlock()
	r.act(ctx, rn, evs, true)
	return api.StartReply{Schema: api.Schema, Run: id, Status: string(aggregate.Status(rn.state).Kind)}, nil
}

// newRunID returns a new run id, "run-" and 20 random hex digits, in a
// partition this runner owns when it owns one (a start then needs no
// forward): about P/owned draws.
func (r *Runner) newRunID() string {
	owned := r.ownedPartitions()
	for tries := 0; ; tries++ {
		var b [10]byte
		_, _ = rand.Read(b[:])
		id := "run-" + hex.EncodeToString(b[:])
		if len(owned) == 0 || tries >= 16*r.nparts || slices.Contains(owned, partition.Of(id, r.nparts)) {
			return id
		}
	}
}

// Reconcile records what happened to an uncertain action (api.Backend).
func (r *Runner) Reconcile(ctx context.Context, req api.ReconcileRequest, stored bool) (api.Reply, error) {
	endpoint := api.EndpointReconcile
	if stored {
		endpoint = api.EndpointReconcileStored
	}
	var out api.Reply
	err := r.route(ctx, req.Run, endpoint, req, &out, func(ctx context.Context, rn *run) error {
		kind, err := aggregate.ContentKind(req.Content)
		if err != nil {
			return err // already an invalid_content *weft.Error
		}
		if err := checkOutput(rn, req.Action, kind, req.Content); err != nil {
			return err
		}
		who, err := r.who(rn, endpoint, req.Action, req.Content, req.Reason, req.By, req.Proof)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, aggregate.Reconcile{Action: req.Action, Content: req.Content, By: who.By, Stored: stored, Reason: req.Reason, Identity: who.Identity, Proof: who.Proof})
		out = r.reply(rn)
		return err
	})
	return out, err
}

// checkOutput refuses reconciliation content of kind output that the
// action's tool's output schema refuses (docs/semantics.md §10: the content is
// the
// tool's encoded output): invalid_content naming the path and the reason.
// An unknown action is left to the aggregate (unknown_action).
func checkOutput(rn *run, action, kind string, content json.RawMessage) error {
	if kind != events.ReconciledOutput {
		return nil
	}
	if tool, err := notAnOutput(rn, action, content); err != nil {
		return &weft.Error{Code: weft.CodeInvalidContent, Message: fmt.Sprintf("reconciliation content is not an output of %s (nor {\"error\": message} or {\"unconfirmed\": note}): %v", tool, err)}
	}
	return nil
}

// Cancel cancels a run (api.Backend); it needs no live runner.
func (r *Runner) Cancel(ctx context.Context, req api.CancelRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointCancel, req, &out, func(ctx context.Context, rn *run) error {
		who, err := r.who(rn, api.EndpointCancel, "", nil, req.Reason, req.By, req.Proof)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, aggregate.Cancel{By: who.By, Reason: req.Reason, Identity: who.Identity, Proof: who.Proof})
		if err == nil {
			r.tel.Emit(ctx, telemetry.RunCancelled, "run", rn.id)
		}
		out = r.reply(rn)
		return err
	})
	return out, err
}
