package runner

import (
	"context"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
)

// Restart restarts a finished run from one of its turns as a new run
// (api.Backend; docs/semantics.md §14, docs/adr/0029-restart-from-a-step.md).
// Any runner reads the parent's whole log (a finished run's log only
// grows by reconciliations and resolutions, which the judgement and the
// recorded version take in) and judges it (aggregate.ForkOf); the new run
// is then started as any run is, by the owner of its partition (a start
// forwarded with the judged fork), bound to the parent's agent at the
// version served now (or req.Version), with the parent's input.
//
// Who restarts it is checked first, as for a cancel (r.whoOf: a command
// proof of proof.RestartSubject, the parent, the turn and the new run, by a
// person key records the key's person verified; identity_required
// applies), and recorded in the new run's RunForked. A retry of a signed
// restart that took effect (req.Run exists, forked from the same turn with
// the same proof) is answered as a start's retry is, already_started with
// the same input, before its proof is checked again: it may have expired
// since the first try (restartedBy).
func (r *Runner) Restart(ctx context.Context, req api.RestartRequest) (api.StartReply, error) {
	if err := r.restartedBy(ctx, req); err != nil {
		return api.StartReply{}, err
	}
	who, err := r.whoOf(proof.RestartSubject(req.From.Run, req.From.Turn, req.Run, req.Reason), req.By, req.Proof)
	if err != nil {
		return api.StartReply{}, err
	}
	history, envs, err := r.loadRecorded(ctx, req.From.Run)
	if err != nil {
		return api.StartReply{}, err
	}
	// The children of its delegations before the fork point, and theirs:
	// their effects are before it too.
	children := map[string][]events.Recorded{}
	for next := aggregate.Delegated(history, req.From.Turn); len(next) > 0; {
		id := next[0]
		next = next[1:]
		if _, seen := children[id]; seen {
			continue
		}
		h, _, err := r.loadRecorded(ctx, id)
		if err != nil {
			return api.StartReply{}, err
		}
		children[id] = h
		next = append(next, aggregate.Delegated(h, 0)...)
	}
	parent, fork, err := aggregate.ForkOf(req.From.Run, history, children, req.From.Turn)
	if err != nil {
		return api.StartReply{}, err
	}
	// The parent's chain hash at the version judged: an auditor links the
	// child to the parent's verified history by it (events.ForkedFrom).
	// (ForkOf judges the whole log read, so Version is its last event.)
	for i := len(envs) - 1; i >= 0; i-- {
		if envs[i].Version == fork.From.Version {
			fork.From.Hash = envs[i].Hash()
			break
		}
	}
	if fork.From.Hash == "" {
		// Nothing is written yet: a fork without its link would verify
		// as one recorded before forks recorded it, which it is not.
		return api.StartReply{}, &weft.Error{Code: weft.CodeInternal, Message: fmt.Sprintf("restart from %s: the log read holds no event at version %d, the fork point judged, to link the fork to", req.From.Run, fork.From.Version)}
	}
	// Not from a run whose removal started: its fork would outlive its log.
	if err := retention.CheckNotBeingPurged(ctx, r.js, req.From.Run); err != nil {
		return api.StartReply{}, err
	}
	fork.By, fork.Reason, fork.Identity, fork.Proof = who.By, req.Reason, who.Identity, who.Proof
	start := api.StartRequest{CommandID: req.CommandID, Run: req.Run, Agent: parent.Agent.Name, Version: req.Version, Input: parent.Input, Correlation: req.Correlation}
	return r.startFork(ctx, start, nil, &fork)
}

// restartedBy answers a signed restart whose new run req.Run exists and
// records this restart (its RunForked names the same parent and turn and
// keeps the same proof): already_started with the same input, as
// aggregate.Decide answers a start's retry. nil when it is not one.
func (r *Runner) restartedBy(ctx context.Context, req api.RestartRequest) error {
	if req.Proof == nil || req.Run == "" {
		return nil
	}
	head, err := r.evlog.Head(ctx, req.Run)
	if err != nil || head.IsZero() {
		return nil // judged by the restart itself
	}
	history, _, err := r.loadRecorded(ctx, req.Run)
	if err != nil {
		return err
	}
	d := proof.CommandDigest(*req.Proof)
	for _, rec := range history {
		f, ok := rec.Event.(events.RunForked)
		if !ok {
			continue
		}
		if f.From.Run == req.From.Run && f.From.Turn == req.From.Turn && f.Proof != nil && f.Proof.Key == req.Proof.Key && proof.CommandDigest(*f.Proof) == d {
			same := true
			return &weft.Error{Code: weft.CodeAlreadyStarted, Message: fmt.Sprintf("run %s exists: this restart made it", req.Run), SameInput: &same}
		}
		return nil
	}
	return nil
}

// loadRecorded reads run's whole log for a judgement: its events, and
// their envelopes (for the chain hashes).
func (r *Runner) loadRecorded(ctx context.Context, run string) ([]events.Recorded, []events.Envelope, error) {
	envs, _, err := r.evlog.Load(ctx, run)
	if err != nil {
		if r.noteQuarantine(err) {
			return nil, nil, err
		}
		return nil, nil, &weft.Error{Code: weft.CodeUnavailable, Message: "read run " + run + ": " + err.Error()}
	}
	history, err := recorded(envs)
	if err != nil {
		return nil, nil, &weft.Error{Code: weft.CodeInternal, Message: "read run " + run + ": " + err.Error()}
	}
	return history, envs, nil
}
