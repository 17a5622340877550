package client

import (
	"context"

	"github.com/weftrun/weft/api"
)

// Hold places a legal hold on a run through the command API
// (weft.api.hold): retention keeps the run and its family until the hold
// is released (docs/security.md, "Retention and legal hold"). Reason and
// By are required; a retry with the same CommandID answers the same hold
// (an empty CommandID gets a fresh one, so keep the one you retry with).
// With roles, only the custodian's credentials may: another's hold is
// refused permission_denied at once.
func (c *Client) Hold(ctx context.Context, req api.HoldRequest) (api.HoldReply, error) {
	return explained(c.cmd.Hold(ctx, req))
}

// ReleaseHold releases a run's legal hold req.Hold (empty when the run has
// one active hold) through the command API (weft.api.release_hold).
func (c *Client) ReleaseHold(ctx context.Context, req api.ReleaseHoldRequest) (api.HoldReply, error) {
	return explained(c.cmd.ReleaseHold(ctx, req))
}
