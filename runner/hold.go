package runner

import (
	"context"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
)

var _ api.HoldBackend = (*Runner)(nil)

// Hold places a legal hold on a run (api.HoldBackend): retention.Place on
// the runner's JetStream, at the runner's clock. It needs no live runner
// of the run: a hold is not an event (docs/adr/0030 §5), and the hold
// and a purge decide on the run's key in weft_holds by compare-and-set.
// Who placed it is checked as for a cancel (r.whoOf: a command proof of
// proof.HoldSubject by a person key records the key's person, verified;
// identity_required applies), after the command's own idempotency: a retry
// of a command that placed a hold answers that hold without checking its
// proof again, which may have expired since (retention.ByCommand).
func (r *Runner) Hold(ctx context.Context, req api.HoldRequest) (api.HoldReply, error) {
	if h, ok, err := retention.ByCommand(ctx, r.js, req.Run, req.CommandID, false); err != nil || ok {
		return holdReply(h), err
	}
	who, err := r.whoOf(proof.HoldSubject(req.Run, req.Reason), req.By, req.Proof)
	if err != nil {
		return api.HoldReply{}, err
	}
	h, err := retention.Place(ctx, r.js, req.CommandID, req.Run, who, req.Reason, r.now())
	if err != nil {
		return api.HoldReply{}, err
	}
	return holdReply(h), nil
}

// ReleaseHold releases a run's legal hold (api.HoldBackend); who
// releases it is checked as for Hold (proof.ReleaseHoldSubject), after a
// retry of a command that released a hold is answered that hold.
func (r *Runner) ReleaseHold(ctx context.Context, req api.ReleaseHoldRequest) (api.HoldReply, error) {
	if h, ok, err := retention.ByCommand(ctx, r.js, req.Run, req.CommandID, true); err != nil || ok {
		return holdReply(h), err
	}
	who, err := r.whoOf(proof.ReleaseHoldSubject(req.Run, req.Hold, req.Reason), req.By, req.Proof)
	if err != nil {
		return api.HoldReply{}, err
	}
	h, err := retention.ReleaseHold(ctx, r.js, req.CommandID, req.Run, req.Hold, who, req.Reason, r.now())
	if err != nil {
		return api.HoldReply{}, err
	}
	return holdReply(h), nil
}

func holdReply(h retention.Hold) api.HoldReply {
	rep := api.HoldReply{Schema: api.Schema, Run: h.Run, Hold: h.ID, By: h.By, Verified: h.Verified, Key: h.Key, Reason: h.Reason, At: h.At}
	if h.Released != nil {
		rep.Released = &api.HoldRelease{By: h.Released.By, Verified: h.Released.Verified, Key: h.Released.Key, Reason: h.Released.Reason, At: h.Released.At}
	}
	return rep
}
