package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/backoff"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Client calls the command API over NATS. It is safe for concurrent use.
//
// A Client made with NewClient alone sends each command once and returns
// every answer as it came: it is the wire, for programs that retry by
// themselves (a tool worker, the chaos and benchmark workloads). With
// WithRetry it follows docs/protocol.md's retry rules, as every
// first-party client does (package client, the weft CLI, the console,
// weft mcp serve): a command answered with a retryable code
// (weft.Code.Retryable) is sent again, with the same command id, after a
// backoff, until it gets another answer or the bound is spent.
type Client struct {
	nc    *nats.Conn
	retry time.Duration // the bound of a command's retries; 0: send once
}

// The retry rules' delays (docs/protocol.md, "Retry rules"): the first
// retry waits RetryFirstDelay, each next one twice as long, never more
// than RetryMaxDelay.
const (
	// RetryFirstDelay is the wait before a command's first retry.
	RetryFirstDelay = 100 * time.Millisecond
	// RetryMaxDelay caps the wait between two tries.
	RetryMaxDelay = 2 * time.Second
	// DefaultRetryWithin is the bound of a command's retries that the
	// first-party clients use unless told otherwise: no retry starts
	// later than this after the first try.
	DefaultRetryWithin = 30 * time.Second
)

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithRetry makes the Client retry a command answered with a retryable
// code (weft.Code.Retryable) with the same command id — one it gives the
// command when the caller gave none —, after RetryFirstDelay doubling up
// to RetryMaxDelay, as long as a retry can start within d of the first try
// and the context lasts; then the last answer is returned. d <= 0 sends
// each command once (the default).
func WithRetry(d time.Duration) ClientOption {
	return func(c *Client) { c.retry = max(d, 0) }
}

// NewClient returns a Client over nc.
func NewClient(nc *nats.Conn, opts ...ClientOption) *Client {
	c := &Client{nc: nc}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewCommandID returns a fresh command id: "cmd-" and 24 random hex
// digits.
func NewCommandID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cmd-" + hex.EncodeToString(b[:])
}

// commandID gives *id a fresh command id when the Client retries and the
// caller gave none, so that every try of the command carries the same.
func (c *Client) commandID(id *string) {
	if c.retry > 0 && *id == "" {
		*id = NewCommandID()
	}
}

// call sends req to weft.api.<endpoint> and decodes the reply into out,
// retrying as the Client is configured to (WithRetry). An error reply is
// returned as its *weft.Error; no responders as unavailable.
func (c *Client) call(ctx context.Context, endpoint string, req, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if c.retry <= 0 {
		return c.once(ctx, endpoint, b, out)
	}
	bound := time.Now().Add(c.retry)
	back := backoff.New(RetryFirstDelay, RetryMaxDelay)
	var last error
	for {
		err := c.once(ctx, endpoint, b, out)
		if err != nil && last != nil && !errors.As(err, new(*weft.Error)) {
			// A try that got no answer (the caller's deadline cut it):
			// it may have been applied, so the answer is "no answer",
			// never the earlier try's retryable code, which says nothing
			// was applied. The same command id sent again gets the reply
			// kept for it if the try applied.
			return fmt.Errorf("%w (the try before was answered: %v)", err, last)
		}
		if err == nil || !weft.ErrorCode(err).Retryable() {
			return err
		}
		last = err
		d := back.Next()
		if time.Now().Add(d).After(bound) || backoff.Sleep(ctx, d) != nil {
			return err
		}
	}
}

// once sends the encoded request b once.
func (c *Client) once(ctx context.Context, endpoint string, b []byte, out any) error {
	m, err := Request(ctx, c.nc, SubjectPrefix+endpoint, b)
	if err != nil {
		var we *weft.Error
		if errors.As(err, &we) {
			return we
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return &weft.Error{Code: weft.CodeUnavailable, Message: "no runner serves the weft command API"}
		}
		return fmt.Errorf("api: %s: %w", endpoint, err)
	}
	if e := ReplyError(m); e != nil {
		return e
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("api: %s reply: %w", endpoint, err)
	}
	return nil
}

// Start starts a run; req.Schema is set for the caller. A Client that
// retries gives a start without a run id one of its own ("run-" and 20
// random hex digits), so that every try starts the same run: a try whose
// append may have landed is answered with a retryable code, and a run id
// chosen by the runner anew on each try would start a second run. A retry
// of such a start answered already_started with the same input is the
// start this call made: it is answered as started.
//
// With an error, the reply names the run the start was for (req.Run, or
// the id this Client chose) and nothing else: after outcome_unknown, or
// no answer, read that run to learn whether it started (docs/semantics.md §8,
// a run can always be answered). A start left to the runner's choice of
// id (a Client that does not retry, no req.Run) names no run.
func (c *Client) Start(ctx context.Context, req StartRequest) (StartReply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	return c.startRun(ctx, EndpointStart, &req.Run, &req)
}

// startRun sends req, a command that starts the run *run (start, restart),
// as Start describes: a retrying Client names the run when req leaves it
// to the runner, a retry's already_started with the same input is the
// start this call made, and an error's reply names the run it was for.
func (c *Client) startRun(ctx context.Context, endpoint string, run *string, req any) (StartReply, error) {
	ours := false
	if c.retry > 0 && *run == "" {
		var b [10]byte
		_, _ = rand.Read(b[:])
		*run, ours = "run-"+hex.EncodeToString(b[:]), true
	}
	var r StartReply
	err := c.call(ctx, endpoint, req, &r)
	var we *weft.Error
	if ours && errors.As(err, &we) && we.Code == weft.CodeAlreadyStarted && we.SameInput != nil && *we.SameInput {
		return StartReply{Schema: Schema, Run: *run, Status: "working"}, nil
	}
	if err != nil {
		return StartReply{Schema: Schema, Run: *run}, err
	}
	return r, nil
}

// Approve approves a pending approval request.
func (c *Client) Approve(ctx context.Context, req ApproveRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointApprove, req, &r)
}

// Reject rejects a pending approval request.
func (c *Client) Reject(ctx context.Context, req RejectRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointReject, req, &r)
}

// Decide sends a batch decision (weft.api.decide): an outcome per item.
// With WithRetry, a batch without a BatchID is given one, and a batch
// whose reply refuses some item with a retryable code (a run's part that
// was not applied: runner_busy, unavailable, …) is sent again with the
// same batch id within the bound — the parts already decided answer the
// same (kept for the batch id), the others are decided again.
func (c *Client) Decide(ctx context.Context, req DecideRequest) (DecideReply, error) {
	req.Schema = Schema
	c.commandID(&req.BatchID)
	bound := time.Now().Add(c.retry)
	back := backoff.New(RetryFirstDelay, RetryMaxDelay)
	for {
		var r DecideReply
		if err := c.call(ctx, EndpointDecide, req, &r); err != nil || c.retry <= 0 || !retryable(r) {
			return r, err
		}
		d := back.Next()
		if time.Now().Add(d).After(bound) || backoff.Sleep(ctx, d) != nil {
			return r, nil
		}
	}
}

// retryable reports whether an item of a batch's reply was refused with a
// retryable code (its run's part was not applied).
func retryable(r DecideReply) bool {
	for _, o := range r.Items {
		if o.Error != nil && o.Error.Code.Retryable() {
			return true
		}
	}
	return false
}

// Reconcile reconciles an uncertain action of a live run.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointReconcile, req, &r)
}

// ReconcileStored reconciles an uncertain action of a finished run.
func (c *Client) ReconcileStored(ctx context.Context, req ReconcileRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointReconcileStored, req, &r)
}

// Resolve records the final truth of an open question (an action
// reconciled as unconfirmed), for audit: nothing resumes.
func (c *Client) Resolve(ctx context.Context, req ResolveRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointResolve, req, &r)
}

// Settle offers a settlement for a settling tool's action.
func (c *Client) Settle(ctx context.Context, req Settlement) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointSettle, req, &r)
}

// Report sends a tool worker's report of an attempt.
func (c *Client) Report(ctx context.Context, req Report) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointReport, req, &r)
}

// Cancel cancels a run.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointCancel, req, &r)
}

// Endpoints returns the endpoints of the "weft" micro service, a fresh
// slice on each call.
func Endpoints() []string {
	return []string{EndpointStart, EndpointApprove, EndpointReject, EndpointReconcile, EndpointReconcileStored, EndpointSettle, EndpointCancel, EndpointReport, EndpointResolve, EndpointPause, EndpointResume, EndpointRestart, EndpointDecide, EndpointHold, EndpointReleaseHold}
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
