package runner

import (
	"context"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/retention"
)

var _ api.HoldBackend = (*Runner)(nil)

// Hold places a legal hold on a run (api.HoldBackend): retention.Place on
// the runner's JetStream, at the runner's clock. It needs no live runner
// of the run: a hold is not an event (docs/adr/0030 §5), and the hold
// and a purge decide on the run's key in weft_holds by compare-and-set.
func (r *Runner) Hold(ctx context.Context, req api.HoldRequest) (api.HoldReply, error) {
	h, err := retention.Place(ctx, r.js, req.CommandID, req.Run, req.By, req.Reason, r.now())
	if err != nil {
		return api.HoldReply{}, err
	}
	return holdReply(h), nil
}

// ReleaseHold releases a run's legal hold (api.HoldBackend).
func (r *Runner) ReleaseHold(ctx context.Context, req api.ReleaseHoldRequest) (api.HoldReply, error) {
	h, err := retention.ReleaseHold(ctx, r.js, req.CommandID, req.Run, req.Hold, req.By, req.Reason, r.now())
	if err != nil {
		return api.HoldReply{}, err
	}
	return holdReply(h), nil
}

func holdReply(h retention.Hold) api.HoldReply {
	rep := api.HoldReply{Schema: api.Schema, Run: h.Run, Hold: h.ID, By: h.By, Reason: h.Reason, At: h.At}
	if h.Released != nil {
		rep.Released = &api.HoldRelease{By: h.Released.By, Reason: h.Released.Reason, At: h.Released.At}
	}
	return rep
}
