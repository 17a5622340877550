// Package client is the Go application's way to drive Weft from outside
// the runner: Client sends the commands of the "weft" micro service
// (weft.api.*: start, approve, reject, decide, reconcile, resolve, settle,
// cancel, and report for tool workers) and the queries of "weft-query"
// (weft.api.query.*: run views, lists, inboxes, open questions, histories),
// and Wait watches a run until it reaches a state. It declares no wire
// type of its own: the command types, their replies and the outcomes are
// package api's (the wire protocol's home), the read models and statuses
// package projections', the query requests and replies package projector's,
// the signed proofs package proof's and events' (docs/adr/0034); a caller
// imports those packages beside this one.
//
// Every refusal is a *weft.Error whose Code is a protocol error code
// (docs/protocol.md); compare with errors.Is or errors.As. A missing runner
// or projector is unavailable. Commands answered with a retryable code are
// retried with the same command id before the answer is returned (New,
// WithoutRetry). A request the NATS server refuses the connection's
// credentials is permission_denied at once, naming the subject and the
// roles whose credentials may publish to it (roles.Explain).
//
// Queries need a projector and commands a runner; package host runs both
// (and the query service) in one process.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/inboxcheck"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/roles"
)

// RejectSigned rejects the approval request req names (req.Revision 0:
// the pending one, whose revision is sent) with a proof signed by kp,
// valid until expires, that covers req.Reason: the subject is read from
// the run's view (ProofSubject), the reason set (proof.Subject.Answering)
// and signed as proof.SignAnswer signs it.
func (c *Client) RejectSigned(ctx context.Context, req api.RejectRequest, kp nkeys.KeyPair, expires time.Time) (api.Reply, error) {
	s, err := c.ProofSubject(ctx, req.Run, req.Action, req.Revision, events.AnswerReject)
	if err != nil {
		return api.Reply{}, err
	}
	rs, err := s.Answering(events.AnswerReject, req.Reason)
	if err != nil {
		return api.Reply{}, err
	}
	p, err := proof.SignAnswer(rs, kp, expires)
	if err != nil {
		return api.Reply{}, err
	}
	req.Revision, req.Proof = s.Revision, &p
	return c.Reject(ctx, req)
}

// ProofSubject reads run's view and returns what a signed answer to the
// approval request of action at revision (0: the pending request) is for:
// wrong_reference when the run has no such request. The runner checks
// every value against the run itself, so a view that is out of date only
// gets the proof refused.
func (c *Client) ProofSubject(ctx context.Context, run, action string, revision int, answer string) (proof.Subject, error) {
	v, err := explained(c.q.Run(ctx, run))
	if err != nil {
		return proof.Subject{}, err
	}
	return v.ProofSubject(action, revision, answer)
}

// Client talks to Weft over one NATS connection. It is safe for
// concurrent use.
type Client struct {
	nc  *nats.Conn
	cmd *api.Client
	q   *projector.Client
	log *eventlog.Log
}

// Option configures New.
type Option func(*options)

type options struct {
	retry time.Duration
}

// WithRetry bounds how long a command answered with a retryable code
// (weft.Code.Retryable: runner_busy, contended, conflict, unavailable,
// settle_unconfirmed) is retried: no retry starts later than d after the
// first try (default api.DefaultRetryWithin). d <= 0 is WithoutRetry.
func WithRetry(d time.Duration) Option { return func(o *options) { o.retry = d } }

// WithoutRetry makes every command be sent once: a retryable answer such
// as runner_busy is returned to the caller.
func WithoutRetry() Option { return WithRetry(0) }

// New returns a Client on nc. Its commands follow docs/protocol.md's retry
// rules: a command answered with a retryable code is sent again with the
// same command id (one the Client gives it when the request has none),
// after a backoff of 100 ms doubling up to 2 s, for up to
// DefaultRetryWithin (WithRetry, WithoutRetry) and as long as the context
// lasts; then its last answer is returned. Every other answer is returned
// at once. outcome_unknown is never retried (the same command id answers
// it again): read the run (Run, Wait) to learn whether the command was
// applied.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	o := options{retry: api.DefaultRetryWithin}
	for _, f := range opts {
		f(&o)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{nc: nc, cmd: api.NewClient(nc, api.WithRetry(o.retry)), q: projector.NewClient(nc), log: eventlog.New(js)}, nil
}

// Ready waits until a runner serves every command endpoint, or ctx ends.
func (c *Client) Ready(ctx context.Context) error { return roles.Explain(c.cmd.Ready(ctx)) }

// Start starts a run. With an error, the reply names the run the start
// was for (req.Run, or the id a retrying Client chose for a start without
// one): after outcome_unknown, or no answer, read that run (Run) to learn
// whether it started (api.Client.Start).
func (c *Client) Start(ctx context.Context, req api.StartRequest) (api.StartReply, error) {
	return explained(c.cmd.Start(ctx, req))
}

// Approve approves a pending approval request. With req.Arguments it
// approves the call narrowed to those edited arguments (a lower amount,
// another account; docs/semantics.md §4, "Approving narrower arguments"):
// the tool's input schema must accept them (invalid_content), the policy
// re-run with them must allow them under the request answered
// (edit_refused), and a signed proof must cover them — set the
// proof.Subject's Approved to the same bytes before signing. The run view
// then shows them (projections.ActionView.Approved).
func (c *Client) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	return explained(c.cmd.Approve(ctx, req))
}

// Reject rejects a pending approval request.
func (c *Client) Reject(ctx context.Context, req api.RejectRequest) (api.Reply, error) {
	return explained(c.cmd.Reject(ctx, req))
}

// Decide answers several approval requests, of one run or many, in one
// request (a batch decision, docs/protocol/40-commands.md): each item is
// checked as a single answer is, each run's items are recorded all or
// nothing, and the reply has an outcome per item. A repeated batch (same
// BatchID) answers the same.
func (c *Client) Decide(ctx context.Context, req api.DecideRequest) (api.DecideReply, error) {
	return explained(c.cmd.Decide(ctx, req))
}

// Reconcile records what happened to an uncertain action of a live run.
func (c *Client) Reconcile(ctx context.Context, req api.ReconcileRequest) (api.Reply, error) {
	return explained(c.cmd.Reconcile(ctx, req))
}

// ReconcileStored records what happened to an uncertain action of a
// finished run, resuming nothing.
func (c *Client) ReconcileStored(ctx context.Context, req api.ReconcileRequest) (api.Reply, error) {
	return explained(c.cmd.ReconcileStored(ctx, req))
}

// Resolve records the final truth of an open question, for audit.
func (c *Client) Resolve(ctx context.Context, req api.ResolveRequest) (api.Reply, error) {
	return explained(c.cmd.Resolve(ctx, req))
}

// Settle offers a settling tool's settlement.
func (c *Client) Settle(ctx context.Context, s api.Settlement) (api.Reply, error) {
	return explained(c.cmd.Settle(ctx, s))
}

// Report sends a tool worker's report of an attempt (a worker in Go uses
// package worker, which does this).
func (c *Client) Report(ctx context.Context, r api.Report) (api.Reply, error) {
	return explained(c.cmd.Report(ctx, r))
}

// Cancel cancels a run.
func (c *Client) Cancel(ctx context.Context, req api.CancelRequest) (api.Reply, error) {
	return explained(c.cmd.Cancel(ctx, req))
}

// Pause pauses a run: it starts no model call and no tool body until
// Resume; work in flight finishes, approvals and reconciliations are still
// answered (docs/semantics.md §13).
func (c *Client) Pause(ctx context.Context, req api.PauseRequest) (api.Reply, error) {
	return explained(c.cmd.Pause(ctx, req))
}

// Resume resumes a paused run.
func (c *Client) Resume(ctx context.Context, req api.ResumeRequest) (api.Reply, error) {
	return explained(c.cmd.Resume(ctx, req))
}

// Restart restarts the finished run req.From.Run as a new run from the
// state before its model turn req.From.Turn: the effects recorded before
// that turn are not run again (their results are in the new run's
// transcript). Refused run_not_finished, invalid_request (a child run:
// restart its root run), wrong_reference (no such turn, a turn before the
// run's own fork point, or calls before it that never ran, faulted, or
// delegated to a child that did not complete) or uncertain_actions
// (reconcile or resolve the actions the error's Actions names first, a
// child run's as "<child>/<action>"); already_started for a run id that
// exists. A retrying client chooses the new run's id as Start does.
func (c *Client) Restart(ctx context.Context, req api.RestartRequest) (api.StartReply, error) {
	return explained(c.cmd.Restart(ctx, req))
}

// Run returns a run's view (projected, or folded from the log when the
// projector has not seen it yet).
func (c *Client) Run(ctx context.Context, run string) (projections.RunView, error) {
	return explained(c.q.Run(ctx, run))
}

// RunFamily returns a run's view with its family status.
func (c *Client) RunFamily(ctx context.Context, run string) (projector.RunReply, error) {
	return explained(c.q.RunFamily(ctx, run))
}

// List returns a page of runs.
func (c *Client) List(ctx context.Context, q projections.ListQuery) (projections.ListPage, error) {
	return explained(c.q.List(ctx, q))
}

// Approvals returns every pending approval request the filter keeps,
// oldest first, following the inbox's pages (`next`) to the last.
func (c *Client) Approvals(ctx context.Context, f projector.InboxRequest) ([]projections.ApprovalItem, error) {
	return explained(c.q.Approvals(ctx, f))
}

// Uncertain returns every uncertain effect the filter keeps, oldest
// first, following the inbox's pages (`next`) to the last.
func (c *Client) Uncertain(ctx context.Context, f projector.InboxRequest) (projector.UncertainReply, error) {
	return explained(c.q.Uncertain(ctx, f))
}

// Questions returns every open question the filter keeps, oldest first,
// following the inbox's pages (`next`) to the last.
func (c *Client) Questions(ctx context.Context, f projector.InboxRequest) ([]projections.QuestionItem, error) {
	return explained(c.q.Questions(ctx, f))
}

// History returns a page of a run's history.
func (c *Client) History(ctx context.Context, q projector.HistoryRequest) (projector.HistoryReply, error) {
	return explained(c.q.History(ctx, q))
}

// Condition is what Wait waits for: a predicate on a run's view.
type Condition func(projections.RunView) bool

// Finished holds once the run has finished.
func Finished(v projections.RunView) bool { return v.Status == projections.StatusFinished }

// Suspended holds while the run waits for people: approvals or uncertain
// effects, nothing in flight.
func Suspended(v projections.RunView) bool { return v.Status == projections.StatusSuspended }

// Settled holds when nothing more happens without a person: the run is
// suspended or finished.
func Settled(v projections.RunView) bool { return Suspended(v) || Finished(v) }

// Wait returns the run's view as soon as until holds for it: at once when
// it holds for the run as it is now, else after the first later decision
// that makes it hold. It watches the run's events in the log (an ordered
// consumer on weft.ev.<run>.>, folded with the read model's rules), so it
// needs no projector and never polls. It returns unknown_run for a run
// with no events, quarantined for a run whose log holds a message no
// reader can fold (docs/reliability.md, "A malformed message"), and ctx's
// error with the last view when ctx ends first. A connection whose reply
// inbox the server refuses (an inbox prefix its permissions do not allow)
// is answered permission_denied naming the inbox at once, not when ctx
// ends: the log's replies would never come.
func (c *Client) Wait(ctx context.Context, run string, until Condition) (projections.RunView, error) {
	if err := inboxcheck.Check(ctx, c.nc); err != nil {
		return projections.RunView{}, &weft.Error{Code: weft.CodePermissionDenied, Message: err.Error()}
	}
	head, err := c.log.Head(ctx, run)
	if err != nil {
		return projections.RunView{}, err
	}
	if head.IsZero() {
		return projections.RunView{}, weft.UnknownRun(run)
	}
	var v projections.RunView
	caught, met := false, false
	werr := c.log.WatchRun(ctx, run, func(e eventlog.RunEvent) error {
		if e.Envelope.Version == 0 {
			// Only caught up: the run's last message is a repair's.
			caught = caught || e.CaughtUp
			if caught && v.Version > 0 && until(v) {
				met = true
				return eventlog.ErrStopWatch
			}
			return nil
		}
		ev, err := e.Envelope.Event()
		if err != nil {
			return fmt.Errorf("client: wait %s: %w", run, err)
		}
		v = projections.Apply(v, events.Recorded{Run: e.Envelope.Run, Version: e.Envelope.Version, At: e.Envelope.Recorded, Event: ev})
		caught = caught || e.CaughtUp
		if caught && e.Last && until(v) {
			met = true
			return eventlog.ErrStopWatch
		}
		return nil
	})
	switch {
	case met:
		return v, nil
	case werr != nil:
		return v, werr
	case ctx.Err() != nil:
		return v, ctx.Err()
	}
	return v, errors.New("client: wait: the watch ended")
}
