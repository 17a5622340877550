package client

import (
	"context"

	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// ApprovalsPage returns one page of the approvals inbox: at most f.Limit
// items after f.Cursor (0: projector.DefaultInboxLimit), and in Next the
// cursor of the following page (empty on the last one). Approvals follows
// every page; a caller that shows one page at a time (the operator's MCP
// tools) asks for pages.
func (c *Client) ApprovalsPage(ctx context.Context, f projector.InboxRequest) (projector.ApprovalsReply, error) {
	return explained(c.q.ApprovalsPage(ctx, f))
}

// UncertainPage returns one page of the uncertain-effects inbox, with the
// cursor of the following page in Next (ApprovalsPage).
func (c *Client) UncertainPage(ctx context.Context, f projector.InboxRequest) (projector.UncertainReply, error) {
	return explained(c.q.UncertainPage(ctx, f))
}

// QuestionsPage returns one page of the open questions, with the cursor
// of the following page in Next (ApprovalsPage).
func (c *Client) QuestionsPage(ctx context.Context, f projector.InboxRequest) (projector.QuestionsReply, error) {
	return explained(c.q.QuestionsPage(ctx, f))
}

// CaughtUp reports whether v, a view of its run read earlier (Run,
// RunFamily), holds every event of the run's log: its version is at least
// the version of the run's last event, read now from the log (a direct
// get of the run's last message, no projector). The read model follows the log eventually; a view
// read before a command was applied (an approval, a reconciliation) is
// known to include it once CaughtUp holds, since a command is answered
// only once its events are in the log. An error when the log cannot be
// read (then nothing is known).
func (c *Client) CaughtUp(ctx context.Context, v projections.RunView) (bool, error) {
	h, err := c.log.Head(ctx, v.Run)
	if err != nil {
		return false, err
	}
	return v.Version >= h.Version, nil
}
