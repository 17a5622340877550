package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

var _ api.Backend = (*Runner)(nil)

// route runs fn on the locked run when this runner drives it (or takes it
// over), and otherwise forwards the request to the live driver and decodes
// its reply into out.
//
// The command waits for the run at most the command timeout (the largest
// of the served agents'), then answers runner_busy and is never applied
// later.
//
// When the command's append finds that another runner took the run over
// meanwhile (this runner's lease had lapsed; it drops the run and its
// decision is void), the command is routed once more, to the new driver,
// instead of being refused with conflict; so is a command whose takeover
// met the previous driver's hand-off (the takeover is recorded alone, and
// the command decided again on the run as it is then).
func (r *Runner) route(ctx context.Context, id, kind string, req, out any, fn func(context.Context, *run) error) error {
	r.commands.Add()
	defer r.commands.Done()
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeoutCause(ctx, r.commandTimeout(), errCommandTimeout)
		rn, err := r.acquire(actx, id)
		cancel()
		if err != nil {
			var fe *forwardError
			if !errors.As(err, &fe) {
				r.noteQuarantine(err)
				return err
			}
			return r.forward(ctx, fe.driver, kind, id, req, out)
		}
		wasDriven, head := rn.driven, rn.head
		pending := rn.takeover != nil
		err = fn(ctx, rn)
		if fe := (*forwardError)(nil); errors.As(err, &fe) && !rn.driven {
			// The takeover this command was to record found the
			// partition owned by another runner (verifyOwner): nothing
			// was recorded, the run is forgotten; its owner decides.
			rn.unlock()
			return r.forward(ctx, fe.driver, kind, id, req, out)
		}
		r.finishTakeover(ctx, rn)
		if err != nil && !transient(err) && rn.driven && rn.takeover == nil && rn.head == head && attempt < 2 {
			// A refusal decided without an append: it is a decision all
			// the same, so it must have been made on the log as it is. A
			// runner that lost the run without noticing (paused while
			// another took it over) re-reads and routes the command to
			// the run's driver instead of answering from stale memory.
			current, cerr := r.current(ctx, rn)
			if cerr != nil {
				rn.unlock()
				if r.noteQuarantine(cerr) {
					return cerr
				}
				return &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("run %s: could not check the run's head before refusing: %v", id, cerr)}
			}
			if !current {
				rn.unlock()
				continue
			}
		}
		lost := wasDriven && !rn.driven && rn.state.Runner() != r.id
		// A takeover the command was to record met the previous driver's
		// hand-off (its append came first): the run stays held, the
		// takeover alone is recorded now (finishTakeover), and the
		// command, decided on the state before the hand-off, was not
		// applied. Like a lost run, it is routed once more, to the run
		// as it is now, instead of being refused with conflict.
		retaken := pending && rn.driven && rn.takeover == nil && rn.state.Runner() == r.id
		rn.unlock()
		r.noteQuarantine(err)
		if we := (*weft.Error)(nil); errors.As(err, &we) && we.Code == weft.CodeOutcomeUnknown {
			return unknownAnswer(kind, ReasonAppendUnknown, we.Message)
		}
		var conflict *eventlog.ConflictError
		if attempt == 0 && (lost || retaken) && errors.As(err, &conflict) {
			continue
		}
		return err
	}
}

// current reports whether rn's state is the log's: the run's head in the
// log (one direct get of its last message) is the one rn holds. When it is
// not, rn is brought up to date (refresh), and dropped if another runner
// drives the run now.
func (r *Runner) current(ctx context.Context, rn *run) (bool, error) {
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := r.evlog.Head(hctx, rn.id)
	if err != nil {
		return false, err
	}
	if h == rn.head {
		return true, nil
	}
	rn.stale = true
	if !r.refresh(ctx, rn) && rn.driven && rn.stale {
		return false, fmt.Errorf("run %s moved on from version %d and could not be read", rn.id, rn.head.Version)
	}
	return false, nil
}

// commandTimeout is the largest command timeout of the served agents.
func (r *Runner) commandTimeout() time.Duration {
	d := time.Duration(0)
	for _, a := range r.list {
		if c, ok := a.Limits().CommandTimeout.Duration(); ok && c > d {
			d = c
		}
	}
	if d == 0 {
		d = 5 * time.Second
	}
	return d
}

func (r *Runner) reply(rn *run) api.Reply {
	return api.Reply{Schema: api.Schema, Run: rn.id, Status: string(aggregate.Status(rn.state).Kind)}
}

// start starts a run; parent links a child run to its delegation (nil for
// a run started through the API).
func (r *Runner) start(ctx context.Context, req api.StartRequest, parent *events.Parent) (api.StartReply, error) {
	return r.startFork(ctx, req, parent, nil)
}

// startFork is start; fork, when set, is the restart the run records
// after its run_started (runner/restart.go).
func (r *Runner) startFork(ctx context.Context, req api.StartRequest, parent *events.Parent, fork *events.RunForked) (api.StartReply, error) {
	id := req.Run
	if id == "" {
		id = r.newRunID()
	}
	if err := eventlog.CheckRun(id); err != nil {
		return api.StartReply{}, err
	}
	ag, ok := r.agents[req.Agent]
	if req.Version != "" {
		ag, ok = r.agents[req.Agent+"@"+req.Version]
	}
	if !ok {
		return api.StartReply{}, &weft.Error{Code: weft.CodeUnknownAgent, Message: r.unknownAgent(req.Agent, req.Version)}
	}
	// Only the owner of the run's partition starts it: forwarded there at
	// once, before anything is read (after a reconnection, once the owned
	// partitions are verified). The start counts as an acquisition in
	// flight (a release of the partition waits for it).
	done, err := r.acquiring(ctx, id)
	defer done()
	if err != nil {
		return api.StartReply{}, err
	}
	if err := r.owns(id); err != nil {
		done()
		var fe *forwardError
		if !errors.As(err, &fe) {
			return api.StartReply{}, err
		}
		req.Run = id
		var out api.StartReply
		// A restart travels under its own kind: a runner of an earlier
		// release refuses it (unknown forwarded command) instead of
		// starting the run fresh without its fork.
		kind := api.EndpointStart
		if fork != nil {
			kind = api.EndpointRestart
		}
		return out, r.forward(ctx, fe.driver, kind, id, forwardedStart{Request: req, Parent: parent, Fork: fork}, &out)
	}
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		return api.StartReply{}, errDraining
	}
	s, head, at, err := r.loadAt(ctx, id)
	if err != nil {
		if r.noteQuarantine(err) {
			return api.StartReply{}, err
		}
		return api.StartReply{}, &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
	}
	if !s.Exists() {
		// A new id only: one direct get, refused already_started when
		// retention purged a run of that id (never used again).
		if err := retention.CheckNotPurged(ctx, r.js, id); err != nil {
			return api.StartReply{}, err
		}
	}
	rn := newRun(id, s, head, ag)
	rn.lastAt = at
	_ = rn.lock(ctx)
	defer rn.unlock()
	// Register the run (locked) before its first append, so that a command
	// for it arriving right after the append waits for this start instead
	// of finding a run "driven by us but not in memory" and recovering it.
	registered, started := false, false
	if !s.Exists() {
		r.mu.Lock()
		draining := r.draining
		if _, ok := r.runs[id]; !ok && !draining {
			r.runs[id], registered = rn, true
		}
		r.mu.Unlock()
		if draining {
			return api.StartReply{}, errDraining
		}
	}
	defer func() { // runs before the unlock
		if registered && !started {
			r.mu.Lock()
			if r.runs[id] == rn {
				delete(r.runs, id)
			}
			r.mu.Unlock()
		}
	}()
	cmd := aggregate.Start{Run: id, Agent: ag.Ref(), Input: req.Input, Correlation: req.Correlation, Limits: ag.Limits(), Typed: ag.Typed(), Runner: r.id, Parent: parent, Fork: fork}
	ctx, span := r.tel.StartRun(ctx, id, ag.Name())
	defer span.End()
	// The driver is written as an intent before the run's first event, so
	// that a crash right after the append leaves no run that no runner
	// knows to recover (docs/semantics.md §8). An entry that exists already is
	// another start's intent (or a stale one): it is corrected once the
	// log says who won.
	intent := uint64(0)
	if !s.Exists() {
		rev, err := r.createDriverKey(ctx, id, r.id)
		switch {
		case err == nil:
			intent = rev
		case errors.Is(err, errDriverKeyExists):
		default:
			return api.StartReply{}, &weft.Error{Code: weft.CodeUnavailable, Message: "driver intent: " + err.Error()}
		}
	}
	// A new run's decision goes to the log now: the start's lane takes
	// the next request meanwhile (api.ReleaseLane; the reply is sent when
	// this returns, once). A start of a run that exists is refused
	// already_started by the decision, with no append: it keeps its lane,
	// so that its error is counted in the service's stats.
	if !s.Exists() {
		api.ReleaseLane(ctx)
	}
	evs, err := r.decideAppend(ctx, rn, cmd)
	if err != nil {
		if rn.stale && registered {
			// The append's outcome is unknown: the run may exist, driven by
			// us. It stays registered; act re-reads it and either drives
			// it or forgets it (refresh).
			rn.driven, started = true, true
			rn.keyed, rn.keyRev = intent != 0, intent
			r.retryLater(id)
			return api.StartReply{}, err
		}
		var conflict *eventlog.ConflictError
		if errors.As(err, &conflict) {
			// Someone started it at the same moment: judge against theirs.
			s, _, lerr := r.load(ctx, id)
			if lerr == nil {
				if _, err = aggregate.Decide(s, cmd, r.clock(rn)); err == nil {
					// The log refused the append, yet what it holds
					// would take the start: never an empty success.
					err = &weft.Error{Code: weft.CodeInternal, Message: "start conflicted with a log that holds no start: " + conflict.Error()}
				}
				if intent != 0 {
					r.correctDriver(id, s)
				}
			}
		} else if intent != 0 {
			r.deleteDriver(id, intent) // nothing landed
		}
		return api.StartReply{}, err
	}
	if len(evs) == 0 {
		return api.StartReply{}, &weft.Error{Code: weft.CodeInternal, Message: "start decided nothing"}
	}
	r.testHook("start-appended", -1, id)
	rn.driven, started = true, true
	rn.keyed, rn.keyRev = intent != 0, intent // else act puts the key
	r.mu.Lock()
	r.runs[id] = rn
	r.mu.Unlock()
	r.act(ctx, rn, evs, true)
	return api.StartReply{Schema: api.Schema, Run: id, Status: string(aggregate.Status(rn.state).Kind)}, nil
}

// newRunID returns a new run id, "run-" and 20 random hex digits, in a
// partition this runner owns when it owns one (a start then needs no
// forward): about P/owned draws.
func (r *Runner) newRunID() string {
	owned := r.ownedPartitions()
	for tries := 0; ; tries++ {
		var b [10]byte
		_, _ = rand.Read(b[:])
		id := "run-" + hex.EncodeToString(b[:])
		if len(owned) == 0 || tries >= 16*r.nparts || slices.Contains(owned, partition.Of(id, r.nparts)) {
			return id
		}
	}
}

// Approve answers an approval request (api.Backend): the references are
// checked first, then the proof, then the policy is re-run with the
// approver's context.
func (r *Runner) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointApprove, req, &out, func(ctx context.Context, rn *run) error {
		err := r.answerOne(ctx, rn, answerOfApprove(req))
		out = r.reply(rn)
		return err
	})
	return out, err
}

// answerSubject is what an answer to action a's request appr is for, as a
// signed proof must state it (package proof): the run, the request, the
// call's tool and arguments as recorded and, for an approve that narrows
// the call (edit) or answers a request re-asked after an edited attempt,
// the approved arguments (proof.Subject.WithApproved).
func answerSubject(rn *run, a aggregate.Action, appr aggregate.Approval, answer, reason string, edit json.RawMessage) proof.Subject {
	s := proof.Subject{Run: rn.id, Action: a.ID, Revision: appr.Revision, Requirement: appr.Requirement, Tool: a.Tool, Arguments: a.Arguments, Answer: answer, Reason: reason}
	return s.WithApproved(edit, a.Edited)
}

// Reject rejects an approval request (api.Backend). A credential or a
// signed proof, when given, is verified like an approval's and its
// reviewer recorded.
func (r *Runner) Reject(ctx context.Context, req api.RejectRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointReject, req, &out, func(ctx context.Context, rn *run) error {
		err := r.answerOne(ctx, rn, answerOfReject(req))
		out = r.reply(rn)
		return err
	})
	return out, err
}

// answer is an approval answer as approve, reject or an item of a batch
// decision carry it: Kind is events.AnswerApprove or AnswerReject.
type answer struct {
	Kind       string
	Action     string
	Revision   int
	Approver   string
	Credential string
	Reason     string
	By         string
	Proof      *events.ApprovalProof
	// Arguments are an approve's edited arguments (nil: the call as asked).
	Arguments json.RawMessage
}

func answerOfApprove(req api.ApproveRequest) answer {
	return answer{Kind: events.AnswerApprove, Action: req.Action, Revision: req.Revision, Approver: req.Approver, Credential: req.Credential, Proof: req.Proof, Arguments: api.EditedArguments(req.Arguments)}
}

func answerOfReject(req api.RejectRequest) answer {
	return answer{Kind: events.AnswerReject, Action: req.Action, Revision: req.Revision, Approver: req.Approver, Credential: req.Credential, Reason: req.Reason, By: req.By, Proof: req.Proof}
}

// answerOne decides one answer alone: checked (checkAnswer), then decided,
// or its refusal answered after the due expiries a refusal of the
// references records (the bare command).
func (r *Runner) answerOne(ctx context.Context, rn *run, ans answer) error {
	c, bare, err := r.checkAnswer(ctx, rn, ans, r.clock(rn))
	if err != nil {
		if bare != nil {
			_ = r.step(ctx, rn, bare)
		}
		return err
	}
	err = r.step(ctx, rn, c)
	r.emitAnswered(ctx, rn, ans)
	return err
}

// emitAnswered emits the telemetry of an answer that was decided.
func (r *Runner) emitAnswered(ctx context.Context, rn *run, ans answer) {
	word := "approved"
	if ans.Kind == events.AnswerReject {
		word = "rejected"
	}
	r.tel.Emit(ctx, telemetry.ApprovalAnswered, "run", rn.id, "action", ans.Action, "answer", word)
}

// checkAnswer checks an answer before it is decided, in the aggregate's
// order (PlanAnswer; docs/semantics.md §4): an approver an agent with
// approvers requires for a reject, a replayed proof, the references — the
// proof before the expiry of a due request — then the proof, and for an
// approve the policy re-run with the approver's context. It returns the
// command to decide (Approve or Reject), or the refusal and, for a refusal
// of the references, the bare command that records the due expiries (a
// refused proof changes nothing: no bare command).
func (r *Runner) checkAnswer(ctx context.Context, rn *run, ans answer, now time.Time) (aggregate.Command, aggregate.Command, error) {
	plan, err := aggregate.PlanAnswer(rn.state, aggregate.AnswerCheck{Answer: ans.Kind, Action: ans.Action, Revision: ans.Revision,
		Approver: ans.Approver, Approvers: len(rn.agent.Approvers()) > 0, Proof: ans.Proof}, now)
	if err != nil {
		return nil, nil, err
	}
	edit, valid, err := r.checkEdit(rn, plan, ans)
	if err != nil {
		return nil, nil, err // an edit the input codec refuses changes nothing
	}
	var pf approvers.Proof
	verified := false
	if plan.Verify {
		in := approvers.Answer{Approver: ans.Approver, Credential: ans.Credential, Signed: ans.Proof}
		if pf, err = approvers.AuthorizeAnswer(ctx, rn.agent.Approvers(), in, answerSubject(rn, plan.Action, plan.Request, ans.Kind, ans.Reason, edit), now); err != nil {
			return nil, nil, err // a refused proof changes nothing
		}
		verified = true
	}
	if plan.Refusal != nil {
		// The bare command records due expiries; the refusal is the
		// pre-check's.
		if ans.Kind == events.AnswerReject {
			return nil, aggregate.Reject{Action: ans.Action, Revision: ans.Revision, Reason: ans.Reason}, plan.Refusal
		}
		return nil, aggregate.Approve{Action: ans.Action, Revision: ans.Revision}, plan.Refusal
	}
	if ans.Kind == events.AnswerReject {
		c := aggregate.Reject{Action: ans.Action, Revision: ans.Revision, Reason: ans.Reason, By: ans.By}
		if verified {
			c.By, c.Verifier, c.Proof, c.Identity = pf.Reviewer(), pf.Approver(), pf.Signed(), answerIdentity(pf.Signed())
		}
		if err := r.people.Required(c.By, c.Identity.Verified, c.Reason, true); err != nil {
			return nil, nil, err
		}
		return c, nil, nil
	}
	id := answerIdentity(pf.Signed())
	if err := r.people.Required(pf.Reviewer(), id.Verified, "", false); err != nil {
		return nil, nil, err
	}
	a, appr := plan.Action, plan.Request
	reqm := policy.Requirement{Name: appr.Requirement.Name, Version: appr.Requirement.Version}
	timeout, _ := rn.state.Limits().PolicyTimeout.Duration()
	pctx := policy.WithReview(ctx, policy.Review{Reviewer: pf.Reviewer(), Verifier: pf.Approver(), Requirement: reqm, Revision: ans.Revision})
	call := policy.Action{Run: rn.id, ActionID: a.ID, Tool: a.Tool, Arguments: a.CallArguments(), Target: targetOf(rn.agent, a.Tool)}
	if edit != nil {
		// The policy judges the edited call, the edit as checked by the
		// input codec (docs/semantics.md §4, "Approving narrower
		// arguments").
		call.Arguments, call.Decoded = edit, valid.Decoded
	}
	if edit != nil || a.Edited != nil {
		// The call runs with an approver's edit: the policy gets the
		// model's arguments too, to hold the edit narrower than them
		// (docs/security.md, "Approving narrower arguments").
		call.Asked = a.Arguments
	}
	dec, perr := policy.Evaluate(pctx, rn.agent.Policy(), call, timeout)
	cfg, _ := rn.agent.ToolConfig(a.Tool)
	return aggregate.Approve{Action: ans.Action, Revision: ans.Revision, Reviewer: pf.Reviewer(), Verifier: pf.Approver(), Proof: pf.Signed(), Identity: id, Policy: PolicyResult(dec, perr), Tool: cfg, Arguments: edit}, nil, nil
}

// checkEdit checks an approve's edited arguments before anything else of
// the answer but its references (docs/semantics.md §4, "Approving narrower
// arguments"): they must decode with the tool's input codec
// (invalid_content, nothing recorded). It returns them normalized by the
// codec (tools.Arguments.JSON), as the policy judges them, the proof
// covers them, the answer records them and the body gets them — the same
// bytes, as for a model's call — and as the codec decoded them; nil for an
// answer without an edit or with one equal to the arguments the call runs
// with (aggregate.EditOf). When the references are refused (PlanAnswer
// answers that refusal) the edit is only compacted, for the proof check
// that comes first.
func (r *Runner) checkEdit(rn *run, plan aggregate.AnswerPlan, ans answer) (json.RawMessage, tools.Arguments, error) {
	if ans.Arguments == nil || ans.Kind != events.AnswerApprove {
		return nil, tools.Arguments{}, nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, ans.Arguments); err != nil {
		return nil, tools.Arguments{}, &weft.Error{Code: weft.CodeInvalidContent, Message: "arguments: the edited arguments are not JSON: " + err.Error()}
	}
	edit := json.RawMessage(c.Bytes())
	if plan.Refusal != nil {
		return aggregate.EditOf(plan.Action, edit), tools.Arguments{}, nil
	}
	outcome, detail, valid := rn.agent.ValidateCall(plan.Action.Tool, edit)
	if outcome != events.CallValid {
		return nil, tools.Arguments{}, &weft.Error{Code: weft.CodeInvalidContent, Message: fmt.Sprintf("arguments: the edited arguments do not fit tool %s's input schema: %s", plan.Action.Tool, detail)}
	}
	if edit = aggregate.EditOf(plan.Action, valid.JSON); edit == nil {
		return nil, tools.Arguments{}, nil
	}
	return edit, valid, nil
}

// checksBudget is how long the checks of one run's part of a batch may
// take before its remaining items are refused unchecked: half the agent's
// command timeout, so that with the last item's policy and the append the
// part is answered within the wait of a runner that forwarded it (twice
// the command timeout) and holds the run no longer than a few commands do.
func checksBudget(rn *run) time.Duration {
	d, ok := rn.state.Limits().CommandTimeout.Duration()
	if !ok || d <= 0 {
		d = 5 * time.Second
	}
	return d / 2
}

// Decide answers one run's part of a batch decision (api.Backend): each
// item checked as it would be alone (checkAnswer), then all of them decided
// as one (aggregate.Answers: all or nothing, one append). When an item is
// refused before the decision (its proof, its references), none is
// decided; a refusal of the references first records the due expiries, as
// a single answer does.
func (r *Runner) Decide(ctx context.Context, req api.DecideRun) (api.DecideRunReply, error) {
	out := api.DecideRunReply{Schema: api.Schema, Run: req.Run}
	err := r.route(ctx, req.Run, api.EndpointDecide, req, &out, func(ctx context.Context, rn *run) error {
		now := r.clock(rn)
		batch := aggregate.Answers{Answers: make([]aggregate.Command, len(req.Items))}
		refusals := make([]error, len(req.Items))
		var bare aggregate.Command
		refused := false
		start, budget := time.Now(), checksBudget(rn)
		for i, it := range req.Items {
			if i > 0 && time.Since(start) >= budget {
				// The run is held while its items are checked: past the
				// budget the rest is refused unchecked, a definite answer
				// (sent again as it is, it would take as long).
				for j := i; j < len(req.Items); j++ {
					refusals[j] = &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("action %s: not checked: this run's items took longer than %s to check (half its command timeout; a slow policy or approver), so none is recorded; send fewer of them per batch", req.Items[j].Action, budget)}
				}
				refused = true
				break
			}
			ans := answerOfApprove(it.Approve())
			if it.Answer == events.AnswerReject {
				ans = answerOfReject(it.Reject())
			}
			c, b, err := r.checkAnswer(ctx, rn, ans, now)
			if ap, ok := c.(aggregate.Approve); ok && err == nil && ap.Policy.Decision == events.PolicyError && ap.Arguments == nil && len(req.Items) > 1 {
				// Alone, this approval ends the run failed (policy_failed,
				// docs/semantics.md §4); a batch never ends a run on its
				// other items' behalf, whatever their order.
				err = &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("action %s: the policy re-run with the approver's context failed (%s): answered alone, this approval ends the run failed (policy_failed); answer it alone, or without it", it.Action, ap.Policy.Reason)}
			}
			if err != nil {
				refusals[i], refused = err, true
				if bare == nil {
					bare = b
				}
				continue
			}
			batch.Answers[i] = c
		}
		var err error
		if refused {
			if bare != nil {
				_ = r.step(ctx, rn, bare)
			}
			err = &aggregate.AnswersRefused{Refusals: refusals}
		} else {
			err = r.step(ctx, rn, batch)
			if err == nil {
				for _, it := range req.Items {
					r.emitAnswered(ctx, rn, answer{Kind: it.Answer, Action: it.Action})
				}
			}
		}
		out.Items = api.Outcomes(req.Items, nil, r.reply(rn).Status)
		if ar, ok := aggregate.IsAnswersRefused(err); ok {
			out.Items = api.Outcomes(req.Items, ar.Refusals, "")
		}
		return err
	})
	if _, ok := aggregate.IsAnswersRefused(err); ok {
		// Refused as a batch: every item says why, in the reply.
		return out, nil
	}
	return out, err
}

// Reconcile records what happened to an uncertain action (api.Backend).
func (r *Runner) Reconcile(ctx context.Context, req api.ReconcileRequest, stored bool) (api.Reply, error) {
	endpoint := api.EndpointReconcile
	if stored {
		endpoint = api.EndpointReconcileStored
	}
	var out api.Reply
	err := r.route(ctx, req.Run, endpoint, req, &out, func(ctx context.Context, rn *run) error {
		kind, err := aggregate.ContentKind(req.Content)
		if err != nil {
			return err // already an invalid_content *weft.Error
		}
		if err := checkOutput(rn, req.Action, kind, req.Content); err != nil {
			return err
		}
		who, err := r.who(rn, endpoint, req.Action, req.Content, req.Reason, req.By, req.Proof)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, aggregate.Reconcile{Action: req.Action, Content: req.Content, By: who.By, Stored: stored, Reason: req.Reason, Identity: who.Identity, Proof: who.Proof})
		out = r.reply(rn)
		return err
	})
	return out, err
}

// checkOutput refuses reconciliation content of kind output that the
// action's tool's output schema refuses (docs/semantics.md §10: the content is
// the
// tool's encoded output): invalid_content naming the path and the reason.
// An unknown action is left to the aggregate (unknown_action).
func checkOutput(rn *run, action, kind string, content json.RawMessage) error {
	if kind != events.ReconciledOutput {
		return nil
	}
	if tool, err := notAnOutput(rn, action, content); err != nil {
		return &weft.Error{Code: weft.CodeInvalidContent, Message: fmt.Sprintf("reconciliation content is not an output of %s (nor {\"error\": message} or {\"unconfirmed\": note}): %v", tool, err)}
	}
	return nil
}

// Cancel cancels a run (api.Backend); it needs no live runner.
func (r *Runner) Cancel(ctx context.Context, req api.CancelRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointCancel, req, &out, func(ctx context.Context, rn *run) error {
		who, err := r.who(rn, api.EndpointCancel, "", nil, req.Reason, req.By, req.Proof)
		if err != nil {
			return err
		}
		err = r.step(ctx, rn, aggregate.Cancel{By: who.By, Reason: req.Reason, Identity: who.Identity, Proof: who.Proof})
		if err == nil {
			r.tel.Emit(ctx, telemetry.RunCancelled, "run", rn.id)
		}
		out = r.reply(rn)
		return err
	})
	return out, err
}
