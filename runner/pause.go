package runner

import (
	"context"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// Pause pauses a run (api.Backend; docs/semantics.md §13); like a cancel
// it needs no live runner: a takeover records the pause with it.
func (r *Runner) Pause(ctx context.Context, req api.PauseRequest) (api.Reply, error) {
	return r.person(ctx, req.Run, api.EndpointPause, req, aggregate.Pause{By: req.By, Reason: req.Reason})
}

// Resume resumes a paused run (api.Backend): what it holds back starts in
// the same decision.
func (r *Runner) Resume(ctx context.Context, req api.ResumeRequest) (api.Reply, error) {
	return r.person(ctx, req.Run, api.EndpointResume, req, aggregate.Resume{By: req.By, Reason: req.Reason})
}

// person decides c, a person's command of endpoint kind on run id, and
// answers the run's status.
func (r *Runner) person(ctx context.Context, id, kind string, req any, c aggregate.Command) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, id, kind, req, &out, func(ctx context.Context, rn *run) error {
		err := r.step(ctx, rn, c)
		out = r.reply(rn)
		return err
	})
	return out, err
}
