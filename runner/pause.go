package runner

import (
	"context"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
)

// Pause pauses a run (api.Backend; docs/semantics.md §13); like a cancel
// it needs no live runner: a takeover records the pause with it.
func (r *Runner) Pause(ctx context.Context, req api.PauseRequest) (api.Reply, error) {
	return r.person(ctx, req.Run, api.EndpointPause, req, req.Reason, req.By, req.Proof, func(w approvers.Who) aggregate.Command {
		return aggregate.Pause{By: w.By, Reason: req.Reason, Identity: w.Identity, Proof: w.Proof}
	})
}

// Resume resumes a paused run (api.Backend): what it holds back starts in
// the same decision.
func (r *Runner) Resume(ctx context.Context, req api.ResumeRequest) (api.Reply, error) {
	return r.person(ctx, req.Run, api.EndpointResume, req, req.Reason, req.By, req.Proof, func(w approvers.Who) aggregate.Command {
		return aggregate.Resume{By: w.By, Reason: req.Reason, Identity: w.Identity, Proof: w.Proof}
	})
}

// person decides the command c makes of who made it (r.who: its command
// proof, reason and typed name), a person's command of endpoint kind on
// run id, and answers the run's status.
func (r *Runner) person(ctx context.Context, id, kind string, req any, reason, by string, signed *events.CommandProof, c func(approvers.Who) aggregate.Command) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, id, kind, req, &out, func(ctx context.Context, rn *run) error {
		who, err := r.who(rn, kind, "", nil, reason, by, signed)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, c(who))
		out = r.reply(rn)
		return err
	})
	return out, err
}
