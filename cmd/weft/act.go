package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
)

// The commands that act on runs go through the command API (package api,
// docs/protocol/40-commands.md). Each invocation sends a fresh command id
// unless --command-id names one, so that a script retrying the same command
// gets the first answer again.

func newCommandID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

// newRunID returns a run id for a start without --run: "run-" and 20
// random hex digits.
func newRunID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "run-" + hex.EncodeToString(b)
}

// views reads runs' views (the query service) and the heads of their logs
// (to tell whether a view has caught up: freshView).
type views struct {
	*client.Client
	log *eventlog.Log
}

// runReader reads a run's view: a client.Client, or the query service's
// own client in tests.
type runReader interface {
	Run(ctx context.Context, run string) (projections.RunView, error)
}

// withAPI connects and hands a client (package client, the front door
// every application uses) to fn; the client
// retries retryable answers within retry (0: it sends each command once),
// and the whole exchange is bounded by --timeout plus retry (send says
// what a deadline that passed means).
func withAPI(ctx context.Context, e *env, retry time.Duration, fn func(ctx context.Context, c *client.Client, q views) error) error {
	return withAPIConn(ctx, e, retry, func(ctx context.Context, c *client.Client, q views) error {
		actx, cancel := context.WithTimeout(ctx, e.timeout+retry)
		defer cancel()
		return fn(actx, c, q)
	})
}

// withAPIConn is withAPI without the deadline: fn bounds each exchange
// itself (decide waits for a person between its exchanges).
func withAPIConn(ctx context.Context, e *env, retry time.Duration, fn func(ctx context.Context, c *client.Client, q views) error) error {
	n, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer closeNode(n)
	c, err := client.New(n.Conn(), client.WithRetry(retry))
	if err != nil {
		return err
	}
	return fn(ctx, c, views{c, eventlog.New(n.JetStream())})
}

func printReply(e *env, asJSON bool, r api.Reply) error {
	if asJSON {
		return printJSON(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "run %s: %s\n", r.Run, r.Status)
	return nil
}

// retryFlags are the retry rules' flags of every command that sends
// commands: --no-retry and --retry-within (docs/protocol.md, "Retry
// rules").
type retryFlags struct {
	noRetry bool
	within  time.Duration
}

// addRetryFlags defines --no-retry and --retry-within.
func addRetryFlags(fs *flag.FlagSet) *retryFlags {
	o := &retryFlags{}
	fs.BoolVar(&o.noRetry, "no-retry", false, "send each command once: answer a retryable refusal (runner_busy, contended, conflict, unavailable, settle_unconfirmed) instead of retrying it")
	fs.DurationVar(&o.within, "retry-within", api.DefaultRetryWithin, "retry a retryable refusal with the same command id for up to this long (the command's answer is awaited for --timeout plus this, all its tries included)")
	return o
}

// retry is the bound of a command's retries: 0 with --no-retry.
func (o *retryFlags) retry() time.Duration {
	if o.noRetry {
		return 0
	}
	return o.within
}

// actOpts are the flags every acting command has: --json and the
// retryFlags.
type actOpts struct {
	json bool
	*retryFlags
}

// addActOpts defines --json, --no-retry and --retry-within.
func addActOpts(fs *flag.FlagSet) *actOpts {
	o := &actOpts{}
	fs.BoolVar(&o.json, "json", false, "print the reply as JSON")
	o.retryFlags = addRetryFlags(fs)
	return o
}

// actFlags defines what every acting command but start has: --command-id
// (into id) and the actOpts, which it returns.
func actFlags(fs *flag.FlagSet, id *string) *actOpts {
	fs.StringVar(id, "command-id", "", "idempotency key of this command (default: a fresh one)")
	return addActOpts(fs)
}

// send is the plumbing every acting command shares: it gives the command a
// fresh id unless --command-id named one, connects, sends the command with
// call — retrying a retryable answer with the same command id unless
// --no-retry — and prints the reply.
//
// An outcome_unknown answer is never retried (the same command id answers
// it again). No answer within the bound (--timeout plus --retry-within) is
// not known either — the command may have been applied, its answer lost —
// and is answered outcome_unknown, never unavailable (nothing applied).
// For both, send reads the run (ref) and says what it shows now
// (unknownOutcome); exit 6.
func send(ctx context.Context, e *env, id *string, o *actOpts, ref runRef, call func(ctx context.Context, c *client.Client, q views) (api.Reply, error)) error {
	if *id == "" {
		*id = newCommandID()
	}
	return withAPI(ctx, e, o.retry(), func(actx context.Context, c *client.Client, q views) error {
		r, err := call(actx, c, q)
		if err == nil {
			return printReply(e, o.json, r)
		}
		again := "whether the command took effect is what the run shows: send it again only with a new --command-id, once the run shows that it did not (the same id answers outcome_unknown again)"
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			// Sent, maybe applied, its answer lost: the same command id
			// is safe to send again.
			again = fmt.Sprintf("send it again with the same --command-id %s%s, which is applied at most once", *id, ref.again)
			err = &weft.Error{Code: weft.CodeOutcomeUnknown, Message: fmt.Sprintf("no answer from the command API within %s (is a runner serving weft.api.*?): whether the command took effect is not known (%v)", e.timeout+o.retry(), err)}
		case weft.ErrorCode(err) != weft.CodeOutcomeUnknown:
			return err
		}
		if ref.run == "" {
			return fmt.Errorf("%w\n%s", err, again)
		}
		// The exchange's context may be spent: the run is read within
		// --timeout of its own.
		rctx, cancel := context.WithTimeout(ctx, e.timeout)
		defer cancel()
		return unknownOutcome(rctx, q, ref, err, again)
	})
}

// runRef is what an acting command acts on: a run, and an action of it
// ("" for a command on the whole run); again is what else a command sent
// again must repeat to be the same (start: its --run).
type runRef struct{ run, action, again string }

// unknownOutcome explains err, an outcome_unknown answer to a command on
// ref (or no answer to it): the command may or may not have taken effect,
// or may still. It reads the run's view once caught up with its log
// (freshView) and says what the run — and the action — shows now, so that
// a person decides from the run, never from a guess; then after: what to
// send again, and when.
func unknownOutcome(ctx context.Context, q views, ref runRef, err error, after string) error {
	var v projections.RunView
	lag, rerr := freshView(ctx, q.log, ref.run, func(ctx context.Context) (projections.RunView, error) {
		rv, err := q.Run(ctx, ref.run)
		if err == nil {
			v = rv
		}
		return rv, err
	})
	if errors.Is(rerr, &weft.Error{Code: weft.CodeUnknownRun}) {
		return fmt.Errorf("%w\nread after this answer: run %s is not known (yet: the read model may not have it). %s (see %s show %s)", err, ref.run, after, self, ref.run)
	}
	if rerr != nil {
		return fmt.Errorf("%w\nthe run could not be read (%v): see %s show %s; %s", err, rerr, self, ref.run, after)
	}
	now := fmt.Sprintf("run %s is %s", ref.run, v.Status)
	if v.Outcome != nil {
		now += " (" + v.Outcome.Kind + ")"
	}
	if ref.action != "" {
		if a, ok := v.Action(ref.action); ok {
			now += fmt.Sprintf("; action %s is %s", ref.action, a.State)
		} else {
			now += fmt.Sprintf("; it has no action %s", ref.action)
		}
	}
	if lag != "" {
		now += " (but " + lag + ")"
	}
	return fmt.Errorf("%w\nread after this answer: %s. %s (see %s show %s)", err, now, after, self, ref.run)
}

func startCommand() command {
	return command{
		name: "start", args: "<agent> <input>", summary: "start a run of an agent",
		examples: []string{`weft start payment-desk "pay invoice INV-7"`, `weft start payment-desk "pay invoice INV-7" --run pay-7 --version 1`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.StartRequest
			fs.StringVar(&req.Run, "run", "", "the run id (1-128 of [A-Za-z0-9_-]); empty: one the CLI chooses (run- and 20 hex digits), printed")
			fs.StringVar(&req.Version, "version", "", "the agent version (empty: the one the runners serve)")
			fs.StringVar(&req.Correlation, "correlation", "", "a correlation id for tracing")
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<agent> <input>"); err != nil {
					return err
				}
				req.Agent, req.Input = args[0], args[1]
				// The CLI chooses the run id of a start without --run, so
				// that a start whose outcome is not known names the run to
				// read and, sent again with it and the same --command-id,
				// starts that run at most once.
				if req.Run == "" {
					req.Run = newRunID()
				}
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, again: " and the same --run " + req.Run}, func(ctx context.Context, c *client.Client, _ views) (api.Reply, error) {
					r, err := c.Start(ctx, req)
					return api.Reply(r), err
				})
			}
		},
	}
}

// pendingRevision sets *rev, when zero (no --revision), to the revision of
// an action's open approval request in the run's view, for approve and
// reject, and reports whether it did. The view is read once it has caught
// up with the run's log (freshView, bounded by viewWait): right after the
// request was re-asked or answered, the read model may not have it yet. A
// view still behind the log after the wait is said on w; a refusal the CLI
// gives itself from such a view says so too.
func pendingRevision(ctx context.Context, w io.Writer, q runReader, log *eventlog.Log, run, action string, rev *int) (bool, error) {
	if *rev != 0 {
		return false, nil
	}
	var v projections.RunView
	lag, err := freshView(ctx, log, run, func(ctx context.Context) (projections.RunView, error) {
		rv, err := q.Run(ctx, run)
		if err == nil {
			v = rv
		}
		return rv, err
	})
	if err != nil {
		return false, err
	}
	behind := ""
	if lag != "" {
		behind = fmt.Sprintf(" in its view, but %s: see %s events %s, or give --revision", lag, self, run)
	}
	a, ok := v.Action(action)
	if !ok {
		var ids []string
		for _, a := range v.Actions {
			ids = append(ids, a.ID)
		}
		return false, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("run %s has no action %s%s%s", run, action, didYouMean(action, ids), behind)}
	}
	switch {
	case a.Pending != nil:
		*rev = a.Pending.Revision
	case len(a.Approvals) > 0:
		// Nothing pending: send the latest request's revision and let the
		// runtime say why it cannot be answered (run_ended,
		// already_answered, approval_expired, ...). The CLI never invents
		// a refusal the server did not give.
		*rev = a.Approvals[len(a.Approvals)-1].Revision
	default:
		return false, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("action %s of run %s never asked for approval (state %s)%s", action, run, a.State, behind)}
	}
	if lag != "" {
		fmt.Fprintf(w, "note: revision %d is read from the run's view, but %s\n", *rev, lag)
	}
	return true, nil
}

// staleRevision explains a stale_reference refusal (err) of an answer
// (verb: approve or reject) whose revision sent pendingRevision took from
// the run's view: the approval request changed after the view was read (it
// was re-asked: docs/semantics.md §4, §8). It reads the view again, once caught
// up
// (freshView), and says what the request is now and the exact command that
// answers it. It never answers again by itself: a person answers the
// request they saw, and they have not seen this one.
func staleRevision(ctx context.Context, q runReader, log *eventlog.Log, verb, run, action string, sent int, err error) error {
	var v projections.RunView
	lag, rerr := freshView(ctx, log, run, func(ctx context.Context) (projections.RunView, error) {
		rv, err := q.Run(ctx, run)
		if err == nil {
			v = rv
		}
		return rv, err
	})
	head := fmt.Sprintf("%%w\nrevision %d was read from the run's view; the approval request changed since, and nothing was answered (the CLI never answers a revision nobody saw)", sent)
	a, ok := v.Action(action)
	switch {
	case rerr != nil:
		return fmt.Errorf(head+". The run could not be read again (%v): see %s show %s", err, rerr, self, run)
	case ok && a.Pending != nil && lag == "":
		p := a.Pending
		return fmt.Errorf(head+". Now pending: revision %d, %s %s, requirement %s v%d; if that is what you mean to %s, run the command again with --revision %d (see %s show %s)",
			err, p.Revision, a.Tool, oneLine(string(a.Arguments), 60), p.Requirement.Name, p.Requirement.Version, verb, p.Revision, self, run)
	case lag != "":
		return fmt.Errorf(head+". The view is still behind: %s; see %s events %s for the current request, then run the command again with its --revision", err, lag, self, run)
	default:
		return fmt.Errorf(head+". Nothing is pending now (state %s): see %s show %s", err, a.State, self, run)
	}
}

func approveCommand() command {
	return command{
		name: "approve", args: "<run> <action>", summary: "approve a pending approval request",
		examples: []string{
			"weft approve pay-7 2/call_2_1 --approver desk --credential alice",
			"weft approve pay-7 2/call_2_1 --revision 1 --approver desk --credential alice",
			"weft approve pay-7 2/call_2_1 --approver keys --signing-key alice.nk   # a signed proof (docs/security.md)",
			`weft approve pay-7 2/call_2_1 --approver desk --credential alice --args '{"invoice":"INV-7","payee":"ACME Ltd","amount":200,"currency":"EUR"}'   # approve a narrower call`,
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.ApproveRequest
			fs.IntVar(&req.Revision, "revision", 0, "the request's revision (default: the pending one, read from the run view)")
			fs.StringVar(&req.Approver, "approver", "", "the approver (one of the agent's approvers) that verifies the credential")
			fs.StringVar(&req.Credential, "credential", "", "the credential the approver verifies")
			edited := fs.String("args", "", "approve the call narrowed to these edited arguments (JSON the tool's input schema accepts; docs/semantics.md §4, \"Approving narrower arguments\")")
			sign := addSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				if req.Approver == "" || (req.Credential == "") == (sign.key == "") {
					return usagef("approve needs --approver and either --credential or --signing-key")
				}
				if *edited != "" {
					if !json.Valid([]byte(*edited)) {
						return usagef("--args is not JSON: %s", oneLine(*edited, 60))
					}
					req.Arguments = json.RawMessage(*edited)
				}
				req.Run, req.Action = args[0], args[1]
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, action: req.Action}, func(ctx context.Context, c *client.Client, q views) (api.Reply, error) {
					if sign.key != "" {
						p, err := signAnswer(ctx, e.stderr, q.Client, sign, req.Run, req.Action, &req.Revision, events.AnswerApprove, "", req.Arguments)
						if err != nil {
							return api.Reply{}, err
						}
						req.Proof = p
						return c.Approve(ctx, req)
					}
					fromView, err := pendingRevision(ctx, e.stderr, q.Client, q.log, req.Run, req.Action, &req.Revision)
					if err != nil {
						return api.Reply{}, err
					}
					r, err := c.Approve(ctx, req)
					if fromView && errors.Is(err, &weft.Error{Code: weft.CodeStaleReference}) {
						return r, staleRevision(ctx, q.Client, q.log, "approve", req.Run, req.Action, req.Revision, err)
					}
					return r, err
				})
			}
		},
	}
}

func rejectCommand() command {
	return command{
		name: "reject", args: "<run> <action>", summary: "reject a pending approval request",
		examples: []string{`weft reject pay-7 2/call_2_1 --reason "not this month" --approver desk --credential alice`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.RejectRequest
			fs.IntVar(&req.Revision, "revision", 0, "the request's revision (default: the pending one, read from the run view)")
			fs.StringVar(&req.Reason, "reason", "", "why (the model reads it)")
			fs.StringVar(&req.Approver, "approver", "", "the approver that verifies the credential")
			fs.StringVar(&req.Credential, "credential", "", "the credential the approver verifies")
			fs.StringVar(&req.By, "by", "", "who rejects, when no credential is given")
			sign := addSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				if req.Reason == "" {
					return usagef("reject needs --reason")
				}
				req.Run, req.Action = args[0], args[1]
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, action: req.Action}, func(ctx context.Context, c *client.Client, q views) (api.Reply, error) {
					if sign.key != "" {
						p, err := signAnswer(ctx, e.stderr, q.Client, sign, req.Run, req.Action, &req.Revision, events.AnswerReject, req.Reason, nil)
						if err != nil {
							return api.Reply{}, err
						}
						req.Proof = p
						return c.Reject(ctx, req)
					}
					fromView, err := pendingRevision(ctx, e.stderr, q.Client, q.log, req.Run, req.Action, &req.Revision)
					if err != nil {
						return api.Reply{}, err
					}
					r, err := c.Reject(ctx, req)
					if fromView && errors.Is(err, &weft.Error{Code: weft.CodeStaleReference}) {
						return r, staleRevision(ctx, q.Client, q.log, "reject", req.Run, req.Action, req.Revision, err)
					}
					return r, err
				})
			}
		},
	}
}

// content builds reconciliation or settlement content from the flags: at
// most one of output (raw JSON), errMsg and note, or a positional JSON.
func content(output, errMsg, note string, positional []string) (json.RawMessage, string, error) {
	n := 0
	for _, s := range []string{output, errMsg, note} {
		if s != "" {
			n++
		}
	}
	if len(positional) > 0 {
		n++
		output = positional[0]
	}
	if n != 1 {
		return nil, "", usagef("give exactly one of --output JSON, --error MESSAGE, --unconfirmed NOTE")
	}
	switch {
	case output != "":
		if !json.Valid([]byte(output)) {
			return nil, "", usagef("--output is not JSON: %s", output)
		}
		return json.RawMessage(output), "output", nil
	case errMsg != "":
		b, _ := json.Marshal(map[string]string{"error": errMsg})
		return b, "error", nil
	default:
		b, _ := json.Marshal(map[string]string{"unconfirmed": note})
		return b, "unconfirmed", nil
	}
}

func reconcileCommand() command {
	return command{
		name: "reconcile", args: "<run> <action> [content-json]", summary: "record what happened to an uncertain action",
		examples: []string{
			`weft reconcile pay-13 2/call_2_1 --output '{"id":"PAY-13","status":"sent"}'`,
			`weft reconcile pay-13 2/call_2_1 --error "the bank rejected it"`,
			`weft reconcile pay-13 2/call_2_1 --unconfirmed "checking with the bank"`,
			`weft reconcile pay-13 2/call_2_1 --stored --unconfirmed "asked the bank"   # on a finished run`,
			`weft reconcile pay-13 2/call_2_1 --error "rejected" --reason "bank ticket 7" --signing-key carol.nk   # verified (docs/security.md)`,
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			output := fs.String("output", "", "the tool's output as JSON: the effect happened")
			errMsg := fs.String("error", "", "a definite failure message: the effect did not happen")
			note := fs.String("unconfirmed", "", "a note: the effect may or may not have happened; the run goes on")
			stored := fs.Bool("stored", false, "reconcile an action of a finished run (resumes nothing)")
			var req api.ReconcileRequest
			fs.StringVar(&req.By, "by", "", "who reconciles (recorded unverified; --signing-key records the key's person, verified)")
			fs.StringVar(&req.Reason, "reason", "", "why (a deployment that requires identities requires it)")
			sign := addCommandSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) < 2 || len(args) > 3 {
					return usagef("want <run> <action> [content-json]")
				}
				c, _, err := content(*output, *errMsg, *note, args[2:])
				if err != nil {
					return err
				}
				req.Run, req.Action, req.Content = args[0], args[1], c
				command := proof.CommandReconcile
				if *stored {
					command = proof.CommandReconcileStored
				}
				if req.Proof, err = signCommand(e.stderr, sign, proof.CommandSubject{Command: command, Run: req.Run, Action: req.Action, Content: c, Reason: req.Reason}); err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, req.Proof); done {
					return err
				}
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, action: req.Action}, func(ctx context.Context, cl *client.Client, _ views) (api.Reply, error) {
					if *stored {
						return cl.ReconcileStored(ctx, req)
					}
					r, err := cl.Reconcile(ctx, req)
					if errors.Is(err, &weft.Error{Code: weft.CodeRunEnded}) {
						return r, fmt.Errorf("%w (the run has finished: use --stored)", err)
					}
					return r, err
				})
			}
		},
	}
}

func resolveCommand() command {
	return command{
		name: "resolve", args: "<run> <action>", summary: "record the final truth of an open question (an action reconciled as unconfirmed), for audit",
		examples: []string{
			`weft resolve pay-13 2/call_2_1 --output '{"id":"PAY-13","status":"sent"}' --by alice   # the bank says it went out`,
			`weft resolve pay-13 2/call_2_1 --error "the bank never received it"`,
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			output := fs.String("output", "", "the tool's output as JSON: the effect happened")
			errMsg := fs.String("error", "", "a definite failure message: the effect did not happen")
			var req api.ResolveRequest
			fs.StringVar(&req.By, "by", "", "who resolves (recorded unverified; --signing-key records the key's person, verified)")
			fs.StringVar(&req.Reason, "reason", "", "why (a deployment that requires identities requires it)")
			sign := addCommandSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				if (*output == "") == (*errMsg == "") {
					return usagef("give exactly one of --output JSON, --error MESSAGE (a resolution is the final truth)")
				}
				c, _, err := content(*output, *errMsg, "", nil)
				if err != nil {
					return err
				}
				req.Run, req.Action, req.Content = args[0], args[1], c
				if req.Proof, err = signCommand(e.stderr, sign, proof.CommandSubject{Command: proof.CommandResolve, Run: req.Run, Action: req.Action, Content: c, Reason: req.Reason}); err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, req.Proof); done {
					return err
				}
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, action: req.Action}, func(ctx context.Context, cl *client.Client, _ views) (api.Reply, error) {
					return cl.Resolve(ctx, req)
				})
			}
		},
	}
}

func cancelCommand() command {
	return command{
		name: "cancel", args: "<run>", summary: "cancel a run",
		examples: []string{`weft cancel pay-7 --reason "duplicate"`, `weft cancel pay-7 --reason "duplicate" --signing-key carol.nk   # verified (docs/security.md)`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.CancelRequest
			fs.StringVar(&req.Reason, "reason", "", "why")
			fs.StringVar(&req.By, "by", "", "who cancels (recorded unverified; --signing-key records the key's person, verified)")
			sign := addCommandSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				req.Run = args[0]
				var err error
				if req.Proof, err = signCommand(e.stderr, sign, proof.CommandSubject{Command: proof.CommandCancel, Run: req.Run, Reason: req.Reason}); err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, req.Proof); done {
					return err
				}
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run}, func(ctx context.Context, c *client.Client, _ views) (api.Reply, error) {
					return c.Cancel(ctx, req)
				})
			}
		},
	}
}

// pauseCommand is `weft pause RUN` (pause true) or `weft resume RUN`
// (docs/semantics.md §13).
func pauseCommand(pause bool) command {
	name, summary, example, who := proof.CommandResume, "resume a paused run", `weft resume pay-7 --reason "vendor confirmed"`, "who resumes"
	if pause {
		name, summary, example, who = proof.CommandPause, "pause a run: it starts no model call and no tool body until resumed", `weft pause pay-7 --reason "checking the vendor"`, "who pauses"
	}
	return command{
		name: name, args: "<run>", summary: summary,
		examples: []string{example, example + " --signing-key carol.nk   # verified (docs/security.md)"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.PauseRequest
			fs.StringVar(&req.Reason, "reason", "", "why")
			fs.StringVar(&req.By, "by", "", who+" (recorded unverified; --signing-key records the key's person, verified)")
			sign := addCommandSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				req.Run = args[0]
				var err error
				if req.Proof, err = signCommand(e.stderr, sign, proof.CommandSubject{Command: name, Run: req.Run, Reason: req.Reason}); err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, req.Proof); done {
					return err
				}
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run}, func(ctx context.Context, c *client.Client, _ views) (api.Reply, error) {
					if pause {
						return c.Pause(ctx, req)
					}
					return c.Resume(ctx, api.ResumeRequest(req))
				})
			}
		},
	}
}

func settleCommand() command {
	return command{
		name: "settle", args: "<run> <action>", summary: "settle a settling tool's action (as its processor would)",
		examples: []string{
			`weft settle refund-8 1/call_1_1 --output '{"id":"RF-8"}' --summary "processor confirmed"`,
			`weft settle refund-8 1/call_1_1 --error "card expired"`,
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			output := fs.String("output", "", "the tool's output as JSON")
			errMsg := fs.String("error", "", "a definite failure (outcome explain)")
			uncertain := fs.String("uncertain", "", "evidence that the effect is uncertain")
			var req api.Settlement
			fs.StringVar(&req.Summary, "summary", "", "what a person needs if the settlement is refused (no secrets)")
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				switch {
				case *output != "" && *errMsg == "" && *uncertain == "":
					if !json.Valid([]byte(*output)) {
						return usagef("--output is not JSON: %s", *output)
					}
					req.Outcome, req.Content = api.OutcomeOutput, json.RawMessage(*output)
				case *errMsg != "" && *output == "" && *uncertain == "":
					req.Outcome, req.Message = api.OutcomeExplain, *errMsg
				case *uncertain != "" && *output == "" && *errMsg == "":
					req.Outcome, req.Evidence = api.OutcomeUncertain, *uncertain
				default:
					return usagef("give exactly one of --output JSON, --error MESSAGE, --uncertain EVIDENCE")
				}
				req.Schema, req.Run, req.Action = 1, args[0], args[1]
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, action: req.Action}, func(ctx context.Context, c *client.Client, _ views) (api.Reply, error) {
					return c.Settle(ctx, req)
				})
			}
		},
	}
}
