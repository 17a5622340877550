package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Client calls the command API over NATS. It is safe for concurrent use.
type Client struct {
	nc *nats.Conn
}

// NewClient returns a Client over nc.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// call sends req to weft.api.<endpoint> and decodes the reply into out. An
// error reply is returned as its *weft.Error; no responders as unavailable.
func (c *Client) call(ctx context.Context, endpoint string, req, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := c.nc.RequestWithContext(ctx, SubjectPrefix+endpoint, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return &weft.Error{Code: weft.CodeUnavailable, Message: "no runner serves the weft command API"}
		}
		return fmt.Errorf("api: %s: %w", endpoint, err)
	}
	var er ErrorReply
	if err := json.Unmarshal(m.Data, &er); err != nil {
		return fmt.Errorf("api: %s reply: %w", endpoint, err)
	}
	if er.Error != nil {
		return er.Error
	}
	return json.Unmarshal(m.Data, out)
}

// Start starts a run; req.Schema is set for the caller.
func (c *Client) Start(ctx context.Context, req StartRequest) (StartReply, error) {
	req.Schema = Schema
	var r StartReply
	return r, c.call(ctx, EndpointStart, req, &r)
}

// Approve approves a pending approval request.
func (c *Client) Approve(ctx context.Context, req ApproveRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointApprove, req, &r)
}

// Reject rejects a pending approval request.
func (c *Client) Reject(ctx context.Context, req RejectRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointReject, req, &r)
}

// Reconcile reconciles an uncertain action of a live run.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointReconcile, req, &r)
}

// ReconcileStored reconciles an uncertain action of a finished run.
func (c *Client) ReconcileStored(ctx context.Context, req ReconcileRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointReconcileStored, req, &r)
}

// Resolve records the final truth of an open question (an action
// reconciled as unconfirmed), for audit: nothing resumes.
func (c *Client) Resolve(ctx context.Context, req ResolveRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointResolve, req, &r)
}

// Settle offers a settlement for a settling tool's action.
func (c *Client) Settle(ctx context.Context, req Settlement) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointSettle, req, &r)
}

// Report sends a tool worker's report of an attempt.
func (c *Client) Report(ctx context.Context, req Report) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointReport, req, &r)
}

// Cancel cancels a run.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (Reply, error) {
	req.Schema = Schema
	var r Reply
	return r, c.call(ctx, EndpointCancel, req, &r)
}

// Endpoints returns the endpoints of the "weft" micro service, a fresh
// slice on each call.
func Endpoints() []string {
	return []string{EndpointStart, EndpointApprove, EndpointReject, EndpointReconcile, EndpointReconcileStored, EndpointSettle, EndpointCancel, EndpointReport, EndpointResolve}
}

// QueueEndpoints returns the endpoints (report, settle) the "weft" micro
// service also serves per tool queue, on weft.api.<endpoint>.<agent>.<version
// token>.<tool>, a fresh slice on each call.
func QueueEndpoints() []string { return []string{EndpointReport, EndpointSettle} }

// Ready waits until a "weft" service answers $SRV.INFO.weft listing every
// endpoint (so that a command sent next finds a responder), or ctx ends.
// It sends no command: the service's stats stay untouched.
func (c *Client) Ready(ctx context.Context) error {
	for {
		if c.ready(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return &weft.Error{Code: weft.CodeUnavailable, Message: "the weft command API did not become ready: " + ctx.Err().Error()}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *Client) ready(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, "$SRV.INFO."+ServiceName, nil)
	if err != nil {
		return false
	}
	var info micro.Info
	if json.Unmarshal(m.Data, &info) != nil {
		return false
	}
	got := make(map[string]bool, len(info.Endpoints))
	for _, e := range info.Endpoints {
		got[e.Subject] = true
	}
	for _, e := range Endpoints() {
		if !got[SubjectPrefix+e] {
			return false
		}
	}
	for _, e := range QueueEndpoints() {
		if !got[SubjectPrefix+e+".*.*.*"] {
			return false
		}
	}
	return true
}
