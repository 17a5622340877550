package runner

import (
	"context"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// Resolve records the final truth of an open question (api.Backend): an
// action reconciled as unconfirmed. On a live run or a finished one alike
// it appends only events.Resolved: nothing resumes and the run does not
// change. Output content is checked against the tool's output schema, as
// for reconcile.
func (r *Runner) Resolve(ctx context.Context, req api.ResolveRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointResolve, req, &out, func(ctx context.Context, rn *run) error {
		kind, err := aggregate.ContentKind(req.Content)
		if err != nil {
			return err
		}
		if a, ok := rn.state.Action(req.Action); ok && a.OpenQuestion() {
			if err := checkOutput(rn, req.Action, kind, req.Content); err != nil {
				return err
			}
		}
		who, err := r.who(rn, api.EndpointResolve, req.Action, req.Content, req.Reason, req.By, req.Proof)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, aggregate.Resolve{Action: req.Action, Content: req.Content, By: who.By, Reason: req.Reason, Identity: who.Identity, Proof: who.Proof})
		out = r.reply(rn)
		return err
	})
	return out, err
}
