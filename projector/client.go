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

// Approvals returns the approvals inbox, optionally of one run or agent.
func (c *Client) Approvals(ctx context.Context, q InboxRequest) ([]projections.ApprovalItem, error) {
	q.Schema = 1
	r, err := call[ApprovalsReply](ctx, c.nc, EndpointApprovals, q)
	return r.Items, err
}

// Uncertain returns the uncertain-effects inbox, optionally of one run or
// agent.
func (c *Client) Uncertain(ctx context.Context, q InboxRequest) (UncertainReply, error) {
	q.Schema = 1
	return call[UncertainReply](ctx, c.nc, EndpointUncertain, q)
}

// Questions returns the open questions (actions reconciled as unconfirmed
// and not resolved yet), optionally of one run or agent.
func (c *Client) Questions(ctx context.Context, q InboxRequest) ([]projections.QuestionItem, error) {
	q.Schema = 1
	r, err := call[QuestionsReply](ctx, c.nc, EndpointQuestions, q)
	return r.Items, err
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
	m, err := nc.RequestWithContext(ctx, QueryPrefix+"."+endpoint, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return r, &weft.Error{Code: weft.CodeUnavailable, Message: "no query service answers on " + QueryPrefix + "." + endpoint + " (is a projector running?)"}
		}
		return r, &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("query %s: %v", endpoint, err)}
	}
	if m.Header.Get("Nats-Service-Error-Code") != "" {
		var e ErrorReply
		if json.Unmarshal(m.Data, &e) == nil && e.Error != nil {
			return r, e.Error
		}
		return r, &weft.Error{Code: weft.Code(m.Header.Get("Nats-Service-Error"))}
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return r, fmt.Errorf("query %s: decode reply: %w", endpoint, err)
	}
	return r, nil
}
