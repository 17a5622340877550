// Package client is the one package a Go application imports to drive Weft
// from outside the runner: Client sends the commands of the "weft" micro
// service (weft.api.*: start, approve, reject, decide, reconcile, resolve,
// settle, cancel, and report for tool workers) and the queries of "weft-query"
// (weft.api.query.*: run views, lists, inboxes, open questions, histories),
// and Wait watches a run until it reaches a state. The wire types a caller
// needs are declared here (as aliases of the packages that serve them), so
// that no caller imports api, projector, projections or worker.
//
// Every refusal is a *weft.Error whose Code is a protocol error code
// (docs/protocol.md); compare with errors.Is or errors.As. A missing runner
// or projector is unavailable. Commands answered with a retryable code are
// retried with the same command id before the answer is returned (New,
// WithoutRetry).
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
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/proof"
)

// The command types (docs/protocol/40-commands.md).
type (
	// StartRequest starts a run of an agent.
	StartRequest = api.StartRequest
	// StartReply answers a start: the run id and its status.
	StartReply = api.StartReply
	// ApproveRequest approves a pending approval request.
	ApproveRequest = api.ApproveRequest
	// RejectRequest rejects a pending approval request.
	RejectRequest = api.RejectRequest
	// ReconcileRequest records what happened to an uncertain action.
	ReconcileRequest = api.ReconcileRequest
	// ResolveRequest records the final truth of an open question.
	ResolveRequest = api.ResolveRequest
	// CancelRequest cancels a run.
	CancelRequest = api.CancelRequest
	// PauseRequest pauses a run (docs/semantics.md §13).
	PauseRequest = api.PauseRequest
	// ResumeRequest resumes a paused run.
	ResumeRequest = api.ResumeRequest
	// RestartRequest restarts a finished run from one of its turns as a
	// new run (docs/semantics.md §14).
	RestartRequest = api.RestartRequest
	// RestartFrom names the finished run and turn a restart starts from.
	RestartFrom = api.RestartFrom
	// Settlement is a settling tool's settlement.
	Settlement = api.Settlement
	// Report is a tool worker's report of an attempt.
	Report = api.Report
	// Reply is the reply of every command but start: the run's status.
	Reply = api.Reply
	// DecideRequest is a batch decision: approval answers of one run or
	// many (weft.api.decide).
	DecideRequest = api.DecideRequest
	// DecideItem is one answer of a batch decision.
	DecideItem = api.DecideItem
	// DecideReply answers a batch decision: an outcome per item.
	DecideReply = api.DecideReply
	// DecideOutcome is one item's outcome.
	DecideOutcome = api.DecideOutcome
)

// The query types (docs/protocol/50-queries.md).
type (
	// RunView is the read model of one run.
	RunView = projections.RunView
	// ActionView is one action of a run view.
	ActionView = projections.ActionView
	// RunReply is a run's view with its family status and its children's.
	RunReply = projector.RunReply
	// ListQuery filters and pages the run list.
	ListQuery = projections.ListQuery
	// ListPage is one page of runs.
	ListPage = projections.ListPage
	// Summary is one run as the lists show it.
	Summary = projections.Summary
	// InboxFilter selects the items of one run or agent ("" for all).
	InboxFilter = projector.InboxRequest
	// ApprovalItem is one pending approval request.
	ApprovalItem = projections.ApprovalItem
	// UncertainReply is the uncertain-effects inbox with ages.
	UncertainReply = projector.UncertainReply
	// UncertainItem is one uncertain effect.
	UncertainItem = projections.UncertainItem
	// QuestionItem is one open question.
	QuestionItem = projections.QuestionItem
	// HistoryRequest asks for a page of a run's history.
	HistoryRequest = projector.HistoryRequest
	// HistoryReply is a page of a run's history.
	HistoryReply = projector.HistoryReply
)

// The signed approval proof types (docs/security.md, "Signed approval
// proofs"): an approver of signed proofs (approvers.Signed) accepts an
// answer only with a proof, sent as ApproveRequest.Proof or
// RejectRequest.Proof, and the run view says of each recorded one whether
// it verifies (ApprovalView.Proof).
type (
	// ApprovalProof is a signed approval proof.
	ApprovalProof = events.ApprovalProof
	// ProofSubject is what a proof answers: the approval request (run,
	// action, revision, requirement), the call (tool, arguments), the
	// edited arguments an approve narrows it to (Approved) and the
	// answer. ApprovalItem.ProofSubject and RunView.ProofSubject return
	// it for a pending request.
	ProofSubject = proof.Subject
	// ApprovalView is one approval request of an action in a run view,
	// with its answer: who gave it, the approver that verified it and,
	// for a signed proof, its ProofStatus.
	ApprovalView = projections.ApprovalView
	// ProofStatus is the check of a recorded proof: the signer's key,
	// whether the proof verifies against the run's own record of the
	// request and the call, and why not.
	ProofStatus = projections.ProofStatus
)

// The answers a proof gives.
const (
	// AnswerApprove approves (ApproveRequest).
	AnswerApprove = events.AnswerApprove
	// AnswerReject rejects (RejectRequest).
	AnswerReject = events.AnswerReject
)

// SignProof returns the proof that the holder of kp (an nkey user key
// pair: nkeys.FromSeed of an approver's .nk file) gives s.Answer to s,
// valid until expires (cut to whole seconds; the approver refuses a proof
// valid for longer than its lifetime, 60 s by default), signed. A reject's
// proof states the reason s gives: sign s.Answering(AnswerReject, reason)
// (which refuses a reason on an approve and an unknown answer)
// with the reason sent in the RejectRequest (RejectSigned does), so that
// the proof covers it; a proof that states none verifies, but the audit
// lists its reason unsigned. A key held elsewhere — a browser's WebCrypto
// key, a hardware key — signs instead: p := proof.New(s, key, expires)
// with key = proof.UserKey of its ed25519 public key, then p.Signature =
// the unpadded base64url ed25519 signature of proof.Digest(p).
func SignProof(s ProofSubject, kp nkeys.KeyPair, expires time.Time) (ApprovalProof, error) {
	return proof.SignAnswer(s, kp, expires)
}

// RejectSigned rejects the approval request req names (req.Revision 0:
// the pending one, whose revision is sent) with a proof signed by kp,
// valid until expires, that covers req.Reason: the subject is read from
// the run's view (ProofSubject), the reason set (ProofSubject.Answering)
// and signed as SignProof signs it.
func (c *Client) RejectSigned(ctx context.Context, req RejectRequest, kp nkeys.KeyPair, expires time.Time) (Reply, error) {
	s, err := c.ProofSubject(ctx, req.Run, req.Action, req.Revision, AnswerReject)
	if err != nil {
		return Reply{}, err
	}
	rs, err := s.Answering(AnswerReject, req.Reason)
	if err != nil {
		return Reply{}, err
	}
	p, err := SignProof(rs, kp, expires)
	if err != nil {
		return Reply{}, err
	}
	req.Revision, req.Proof = s.Revision, &p
	return c.Reject(ctx, req)
}

// ProofSubject reads run's view and returns what a signed answer to the
// approval request of action at revision (0: the pending request) is for:
// wrong_reference when the run has no such request. The runner checks
// every value against the run itself, so a view that is out of date only
// gets the proof refused.
func (c *Client) ProofSubject(ctx context.Context, run, action string, revision int, answer string) (ProofSubject, error) {
	v, err := c.q.Run(ctx, run)
	if err != nil {
		return ProofSubject{}, err
	}
	return v.ProofSubject(action, revision, answer)
}

// The outcomes of a Settlement or a Report (api's, the wire's).
const (
	// OutcomeOutput reports that the body returned its output (Content).
	OutcomeOutput = api.OutcomeOutput
	// OutcomeExplain reports a definite failure the model sees (Message).
	OutcomeExplain = api.OutcomeExplain
	// OutcomeUncertain reports that the effect may have happened (Evidence).
	OutcomeUncertain = api.OutcomeUncertain
	// OutcomeOversize reports an output over max result bytes (Report.Bytes).
	OutcomeOversize = api.OutcomeOversize
	// OutcomeLost reports an attempt that ended without a result of its
	// own (Report.Cause).
	OutcomeLost = api.OutcomeLost
)

// The run statuses of a RunView (docs/semantics.md §6).
const (
	// StatusWorking is a run with a model call or a tool body in flight.
	StatusWorking = projections.StatusWorking
	// StatusUnattended is a run handed off and not recovered yet.
	StatusUnattended = projections.StatusUnattended
	// StatusSuspended is a run waiting for people (approvals, uncertain effects).
	StatusSuspended = projections.StatusSuspended
	// StatusFinished is a run that reached its outcome.
	StatusFinished = projections.StatusFinished
	// StatusPaused is a run a person paused: it starts no model call and
	// no tool body until resumed (docs/semantics.md §13).
	StatusPaused = projections.StatusPaused
	// StatusQuarantined is a run whose log holds a message no reader can fold
	// (RunView.Quarantine names it); nothing acts on the run until it is
	// repaired (`weft repair`).
	StatusQuarantined = projections.StatusQuarantined
)

// Client talks to Weft over one NATS connection. It is safe for
// concurrent use.
type Client struct {
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
// first try (default DefaultRetryWithin). d <= 0 is WithoutRetry.
func WithRetry(d time.Duration) Option { return func(o *options) { o.retry = d } }

// WithoutRetry makes every command be sent once: a retryable answer such
// as runner_busy is returned to the caller.
func WithoutRetry() Option { return WithRetry(0) }

// DefaultRetryWithin is the default bound of a command's retries.
const DefaultRetryWithin = api.DefaultRetryWithin

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
	o := options{retry: DefaultRetryWithin}
	for _, f := range opts {
		f(&o)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{cmd: api.NewClient(nc, api.WithRetry(o.retry)), q: projector.NewClient(nc), log: eventlog.New(js)}, nil
}

// Ready waits until a runner serves every command endpoint, or ctx ends.
func (c *Client) Ready(ctx context.Context) error { return c.cmd.Ready(ctx) }

// Start starts a run. With an error, the reply names the run the start
// was for (req.Run, or the id a retrying Client chose for a start without
// one): after outcome_unknown, or no answer, read that run (Run) to learn
// whether it started (api.Client.Start).
func (c *Client) Start(ctx context.Context, req StartRequest) (StartReply, error) {
	return c.cmd.Start(ctx, req)
}

// Approve approves a pending approval request. With req.Arguments it
// approves the call narrowed to those edited arguments (a lower amount,
// another account; docs/semantics.md §4, "Approving narrower arguments"):
// the tool's input schema must accept them (invalid_content), the policy
// re-run with them must allow them under the request answered
// (edit_refused), and a signed proof must cover them — set the
// ProofSubject's Approved to the same bytes before signing. The run view
// then shows them (ActionView.Approved).
func (c *Client) Approve(ctx context.Context, req ApproveRequest) (Reply, error) {
	return c.cmd.Approve(ctx, req)
}

// Reject rejects a pending approval request.
func (c *Client) Reject(ctx context.Context, req RejectRequest) (Reply, error) {
	return c.cmd.Reject(ctx, req)
}

// Decide answers several approval requests, of one run or many, in one
// request (a batch decision, docs/protocol/40-commands.md): each item is
// checked as a single answer is, each run's items are recorded all or
// nothing, and the reply has an outcome per item. A repeated batch (same
// BatchID) answers the same.
func (c *Client) Decide(ctx context.Context, req DecideRequest) (DecideReply, error) {
	return c.cmd.Decide(ctx, req)
}

// Reconcile records what happened to an uncertain action of a live run.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (Reply, error) {
	return c.cmd.Reconcile(ctx, req)
}

// ReconcileStored records what happened to an uncertain action of a
// finished run, resuming nothing.
func (c *Client) ReconcileStored(ctx context.Context, req ReconcileRequest) (Reply, error) {
	return c.cmd.ReconcileStored(ctx, req)
}

// Resolve records the final truth of an open question, for audit.
func (c *Client) Resolve(ctx context.Context, req ResolveRequest) (Reply, error) {
	return c.cmd.Resolve(ctx, req)
}

// Settle offers a settling tool's settlement.
func (c *Client) Settle(ctx context.Context, s Settlement) (Reply, error) {
	return c.cmd.Settle(ctx, s)
}

// Report sends a tool worker's report of an attempt (a worker in Go uses
// package worker, which does this).
func (c *Client) Report(ctx context.Context, r Report) (Reply, error) {
	return c.cmd.Report(ctx, r)
}

// Cancel cancels a run.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (Reply, error) {
	return c.cmd.Cancel(ctx, req)
}

// Pause pauses a run: it starts no model call and no tool body until
// Resume; work in flight finishes, approvals and reconciliations are still
// answered (docs/semantics.md §13).
func (c *Client) Pause(ctx context.Context, req PauseRequest) (Reply, error) {
	return c.cmd.Pause(ctx, req)
}

// Resume resumes a paused run.
func (c *Client) Resume(ctx context.Context, req ResumeRequest) (Reply, error) {
	return c.cmd.Resume(ctx, req)
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
func (c *Client) Restart(ctx context.Context, req RestartRequest) (StartReply, error) {
	return c.cmd.Restart(ctx, req)
}

// Run returns a run's view (projected, or folded from the log when the
// projector has not seen it yet).
func (c *Client) Run(ctx context.Context, run string) (RunView, error) { return c.q.Run(ctx, run) }

// RunFamily returns a run's view with its family status.
func (c *Client) RunFamily(ctx context.Context, run string) (RunReply, error) {
	return c.q.RunFamily(ctx, run)
}

// List returns a page of runs.
func (c *Client) List(ctx context.Context, q ListQuery) (ListPage, error) { return c.q.List(ctx, q) }

// Approvals returns every pending approval request the filter keeps,
// oldest first, following the inbox's pages (`next`) to the last.
func (c *Client) Approvals(ctx context.Context, f InboxFilter) ([]ApprovalItem, error) {
	return c.q.Approvals(ctx, f)
}

// Uncertain returns every uncertain effect the filter keeps, oldest
// first, following the inbox's pages (`next`) to the last.
func (c *Client) Uncertain(ctx context.Context, f InboxFilter) (UncertainReply, error) {
	return c.q.Uncertain(ctx, f)
}

// Questions returns every open question the filter keeps, oldest first,
// following the inbox's pages (`next`) to the last.
func (c *Client) Questions(ctx context.Context, f InboxFilter) ([]QuestionItem, error) {
	return c.q.Questions(ctx, f)
}

// History returns a page of a run's history.
func (c *Client) History(ctx context.Context, q HistoryRequest) (HistoryReply, error) {
	return c.q.History(ctx, q)
}

// Condition is what Wait waits for: a predicate on a run's view.
type Condition func(RunView) bool

// Finished holds once the run has finished.
func Finished(v RunView) bool { return v.Status == StatusFinished }

// Suspended holds while the run waits for people: approvals or uncertain
// effects, nothing in flight.
func Suspended(v RunView) bool { return v.Status == StatusSuspended }

// Settled holds when nothing more happens without a person: the run is
// suspended or finished.
func Settled(v RunView) bool { return Suspended(v) || Finished(v) }

// Wait returns the run's view as soon as until holds for it: at once when
// it holds for the run as it is now, else after the first later decision
// that makes it hold. It watches the run's events in the log (an ordered
// consumer on weft.ev.<run>.>, folded with the read model's rules), so it
// needs no projector and never polls. It returns unknown_run for a run
// with no events, quarantined for a run whose log holds a message no
// reader can fold (docs/reliability.md, "A malformed message"), and ctx's
// error with the last view when ctx ends first.
func (c *Client) Wait(ctx context.Context, run string, until Condition) (RunView, error) {
	head, err := c.log.Head(ctx, run)
	if err != nil {
		return RunView{}, err
	}
	if head.IsZero() {
		return RunView{}, weft.UnknownRun(run)
	}
	var v RunView
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
