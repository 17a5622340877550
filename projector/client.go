package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/projections"
)

// Client calls the query service over NATS request/reply. Errors the service
// answers are *weft.Error; a missing service or server is *weft.Error
// unavailable.
type Client struct {
	nc *nats.Conn
}

// NewClient returns a client on nc.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// Endpoints returns the endpoints of the query service, a fresh slice on
// each call.
func Endpoints() []string {
	return []string{EndpointRun, EndpointList, EndpointApprovals, EndpointUncertain, EndpointQuestions, EndpointHistory}
}

// Ready waits until a query service answers $SRV.INFO.weft-query listing
// every endpoint (so that a query sent next finds a responder), or ctx
// ends (unavailable). It sends no query: the service's stats stay
// untouched.
func (c *Client) Ready(ctx context.Context) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		m, err := c.nc.RequestWithContext(rctx, "$SRV.INFO."+ServiceName, nil)
		cancel()
		if err == nil {
			var info micro.Info
			if json.Unmarshal(m.Data, &info) == nil {
				got := make(map[string]bool, len(info.Endpoints))
				for _, e := range info.Endpoints {
					got[e.Subject] = true
				}
				all := true
				for _, e := range Endpoints() {
					all = all && got[QueryPrefix+"."+e]
				}
				if all {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return &weft.Error{Code: weft.CodeUnavailable, Message: "the query service did not become ready: " + ctx.Err().Error()}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Run returns a run's view.
func (c *Client) Run(ctx context.Context, run string) (projections.RunView, error) {
	r, err := call[RunReply](ctx, c.nc, EndpointRun, RunRequest{Schema: 1, Run: run})
	return r.View, err
}

// RunFamily returns a run's view with its family status and the status of
// each of its child runs.
func (c *Client) RunFamily(ctx context.Context, run string) (RunReply, error) {
	return call[RunReply](ctx, c.nc, EndpointRun, RunRequest{Schema: 1, Run: run})
}

// List returns a page of runs.
func (c *Client) List(ctx context.Context, q projections.ListQuery) (projections.ListPage, error) {
	return call[projections.ListPage](ctx, c.nc, EndpointList, ListRequest{Schema: 1, ListQuery: q})
}

// Approvals returns every pending approval request (of one run or agent
// when q names it) from q.Cursor on, oldest first: it asks for page after
// page (q.Limit items each; 0: DefaultInboxLimit), following each reply's
// Next, so an inbox larger than one page is returned whole. ApprovalsPage
// returns one page.
func (c *Client) Approvals(ctx context.Context, q InboxRequest) ([]projections.ApprovalItem, error) {
	var out []projections.ApprovalItem
	err := follow(ctx, q, c.ApprovalsPage, func(r ApprovalsReply) string {
		out = append(out, r.Items...)
		return r.Next
	})
	return out, err
}

// ApprovalsPage returns one page of the approvals inbox: at most q.Limit
// items after q.Cursor, and in Next the cursor of the following page
// (empty on the last one).
func (c *Client) ApprovalsPage(ctx context.Context, q InboxRequest) (ApprovalsReply, error) {
	q.Schema = 1
	return call[ApprovalsReply](ctx, c.nc, EndpointApprovals, q)
}

// Uncertain returns every uncertain effect (of one run or agent when q
// names it) from q.Cursor on, oldest first, following each page's Next as
// Approvals does. Now is the first page's time; each item's age was
// computed when its page was answered. Next is always empty.
func (c *Client) Uncertain(ctx context.Context, q InboxRequest) (UncertainReply, error) {
	var out UncertainReply
	err := follow(ctx, q, c.UncertainPage, func(r UncertainReply) string {
		if out.Schema == 0 {
			out.Schema, out.Now = r.Schema, r.Now
		}
		out.Items = append(out.Items, r.Items...)
		return r.Next
	})
	return out, err
}

// UncertainPage returns one page of the uncertain-effects inbox, with
// the cursor of the following page in Next.
func (c *Client) UncertainPage(ctx context.Context, q InboxRequest) (UncertainReply, error) {
	q.Schema = 1
	return call[UncertainReply](ctx, c.nc, EndpointUncertain, q)
}

// Questions returns every open question (actions reconciled as
// unconfirmed and not resolved yet; of one run or agent when q names it)
// from q.Cursor on, oldest first, following each page's Next as Approvals
// does.
func (c *Client) Questions(ctx context.Context, q InboxRequest) ([]projections.QuestionItem, error) {
	var out []projections.QuestionItem
	err := follow(ctx, q, c.QuestionsPage, func(r QuestionsReply) string {
		out = append(out, r.Items...)
		return r.Next
	})
	return out, err
}

// QuestionsPage returns one page of the open questions, with the cursor
// of the following page in Next.
func (c *Client) QuestionsPage(ctx context.Context, q InboxRequest) (QuestionsReply, error) {
	q.Schema = 1
	return call[QuestionsReply](ctx, c.nc, EndpointQuestions, q)
}

// follow asks page for q and every following page, handing each reply to
// take, which returns the reply's Next, until a page has none.
func follow[R any](ctx context.Context, q InboxRequest, page func(context.Context, InboxRequest) (R, error), take func(R) string) error {
	for {
		r, err := page(ctx, q)
		if err != nil {
			return err
		}
		next := take(r)
		if next == "" {
			return nil
		}
		if next == q.Cursor {
			return fmt.Errorf("query: an inbox page's next cursor names its own position")
		}
		q.Cursor = next
	}
}

// History returns one page of a run's history.
func (c *Client) History(ctx context.Context, q HistoryRequest) (HistoryReply, error) {
	q.Schema = 1
	return call[HistoryReply](ctx, c.nc, EndpointHistory, q)
}

func call[R any, Q any](ctx context.Context, nc *nats.Conn, endpoint string, q Q) (R, error) {
	var r R
	body, err := json.Marshal(q)
	if err != nil {
		return r, err
	}
	m, err := api.Request(ctx, nc, QueryPrefix+"."+endpoint, body)
	if err != nil {
		var we *weft.Error
		if errors.As(err, &we) {
			return r, we
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return r, &weft.Error{Code: weft.CodeUnavailable, Message: "no query service answers on " + QueryPrefix + "." + endpoint + " (is a projector running?)"}
		}
		return r, &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("query %s: %v", endpoint, err)}
	}
	if e := api.ReplyError(m); e != nil {
		return r, e
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return r, fmt.Errorf("query %s: decode reply: %w", endpoint, err)
	}
	return r, nil
}
