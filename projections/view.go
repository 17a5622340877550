// Package projections folds a run's events into the read models people and
// programs query: the run view, the run summary used by the lists, the
// approvals inbox and the uncertain-effects inbox.
//
// Everything here is a pure function of the events it is given: no clock, no
// I/O, no NATS, no ids generated. Time arrives on the events (their recorded
// time) or as an argument (the age of an uncertain effect). The projector
// (package projector) stores the results in KV; rebuilding them from event 1
// and updating them one event at a time through their JSON encoding give the
// same bytes, which the randomized tests prove.
//
// The fold is version-guarded: Apply ignores an event whose version is not
// the view's next one, so a projector that re-reads an event after a crash
// changes nothing.
//
// The state machine is the aggregate's, not a copy of it (docs/adr/0017):
// an action's state after each event is aggregate.ActionTransition's, the
// states are aggregate.ActionState's values, which states are in flight is
// ActionState.Active, and the run status (working, unattended, suspended,
// finished; docs/semantics.md §6, and paused, §13) is aggregate.RunStatusOf
// (with aggregate.PausedStatus) over the facts the
// view keeps, without keeping the aggregate's whole state. What the view
// adds is presentation: times, summaries, the approval history, questions
// and children. package audit still compares the two on any run's
// history.
//
// A run's status with its children's (a parent waiting only on suspended
// child runs is suspended as a family) is FamilyStatus, computed at read
// time from the views of the run and its children and never stored: a
// child's event changes it without any event of the parent's, so it cannot
// be part of a view folded from the parent's events alone.
package projections

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// The run statuses of docs/semantics.md §6, the values of aggregate.StatusKind.
const (
	// StatusWorking means a model call or an action is in flight under a
	// live runner.
	StatusWorking = string(aggregate.StatusWorking)
	// StatusUnattended means the run was handed off and no runner has
	// recovered it yet.
	StatusUnattended = string(aggregate.StatusUnattended)
	// StatusSuspended means nothing is in flight and people must answer
	// approvals or reconcile uncertain effects.
	StatusSuspended = string(aggregate.StatusSuspended)
	// StatusFinished means the run reached its outcome.
	StatusFinished = string(aggregate.StatusFinished)
	// StatusPaused means a person paused the run (docs/semantics.md §13):
	// it starts no model call and no tool body until resumed.
	StatusPaused = string(aggregate.StatusPaused)
)

// Statuses returns the run statuses in their documented order, a fresh
// slice on each call.
func Statuses() []string {
	return []string{StatusWorking, StatusUnattended, StatusSuspended, StatusPaused, StatusFinished}
}

// The action states of docs/semantics.md §5: the values of
// aggregate.ActionState,
// defined there once.
const (
	// StateRequested means the model asked for the call; validation and
	// policy have not answered yet.
	StateRequested = string(aggregate.ActionRequested)
	// StateQueued means the action may run and waits for a slot (or a
	// replay waits for its fence).
	StateQueued = string(aggregate.ActionQueued)
	// StateRunning means an attempt is fenced: its body may be running.
	StateRunning = string(aggregate.ActionRunning)
	// StateSettling means a settling tool's body was stopped and its settle
	// window is open.
	StateSettling = string(aggregate.ActionSettling)
	// StateAwaitingApproval means a person's approval is requested.
	StateAwaitingApproval = string(aggregate.ActionAwaitingApproval)
	// StateUncertain means the effect may or may not have happened.
	StateUncertain = string(aggregate.ActionUncertain)
	// StateSucceeded means the body returned its output.
	StateSucceeded = string(aggregate.ActionSucceeded)
	// StateToolFailed means the body failed definitely (Explain).
	StateToolFailed = string(aggregate.ActionToolFailed)
	// StateDenied means the policy denied the action.
	StateDenied = string(aggregate.ActionDenied)
	// StateRejected means a person rejected it or its request expired.
	StateRejected = string(aggregate.ActionRejected)
	// StateInvalidArguments means the arguments did not validate.
	StateInvalidArguments = string(aggregate.ActionInvalidArguments)
	// StateUnknownTool means no tool has the called name.
	StateUnknownTool = string(aggregate.ActionUnknownTool)
	// StateReconciled means a person or a late settlement said what
	// happened.
	StateReconciled = string(aggregate.ActionReconciled)
	// StateNotStarted means the action ended without ever starting.
	StateNotStarted = string(aggregate.ActionNotStarted)
	// StateFaulted means the result could not be fed to the model (over max
	// result bytes); the effect did happen.
	StateFaulted = string(aggregate.ActionFaulted)
	// StateDelegated means the action started a child run (a sub-agent
	// delegation) and waits for its outcome.
	StateDelegated = string(aggregate.ActionDelegated)
	// StateChildSettled means the child run finished; Result summarizes what
	// the model reads.
	StateChildSettled = string(aggregate.ActionChildSettled)
	// StateLimitReached means a delegation was over max children, max depth
	// or the family turn budget (checked before policy).
	StateLimitReached = string(aggregate.ActionLimitReached)
)

// SummaryBytes is the longest result summary a view keeps; longer contents
// are cut and end with "…".
const SummaryBytes = 200

// RunView is the read model of one run: what it is, what it did and what it
// waits for. It is encoded as JSON in the weft_views bucket; its encoding is
// deterministic (struct fields only, no maps).
type RunView struct {
	// Schema is the view's schema version (1).
	Schema int `json:"schema"`
	// Run is the run id.
	Run string `json:"run"`
	// Agent is the agent the run is bound to.
	Agent events.AgentRef `json:"agent"`
	// Input is the run's input; Correlation the caller's correlation id.
	Input       string `json:"input"`
	Correlation string `json:"correlation,omitempty"`
	// Status is working, unattended, suspended, paused or finished; quarantined
	// (StatusQuarantined) when Quarantine is set.
	Status string `json:"status"`
	// Quarantine is set while the run's log holds a message no reader can
	// fold: the view shows the run as it was before that message.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
	// Outcome is set once the run finished.
	Outcome *events.Outcome `json:"outcome,omitempty"`
	// Approvals lists the actions awaiting approval, Uncertain the actions
	// whose effect is uncertain, both in action order.
	Approvals []string `json:"approvals"`
	Uncertain []string `json:"uncertain"`
	// Questions lists the open questions: actions reconciled as
	// unconfirmed and not resolved yet, in action order. They do not make
	// the run suspended: it went on.
	Questions []string `json:"questions,omitempty"`
	// Turns is the number of model turns spent.
	Turns int64 `json:"turns"`
	// Usage sums the token usage the model reported.
	Usage Usage `json:"usage"`
	// Incarnation counts recoveries (1 at start).
	Incarnation int `json:"incarnation"`
	// Runner is the runner driving the run (the last one to start or recover
	// it).
	Runner string `json:"runner,omitempty"`
	// ModelInFlight is set while a model turn is requested and not answered
	// (including a retry waiting for its delay).
	ModelInFlight bool `json:"model_in_flight"`
	// HandedOff is set after RunHandedOff until a runner recovers the run.
	HandedOff bool `json:"handed_off"`
	// Cancelling is set once a cancellation was requested.
	Cancelling bool `json:"cancelling"`
	// Cancelled is who requested the cancellation, and why.
	Cancelled *PersonView `json:"cancelled,omitempty"`
	// Pause is set while the run is paused (docs/semantics.md §13): who
	// paused it, why and when.
	Pause *PauseView `json:"pause,omitempty"`
	// Parent is set on a child run: the parent run and action that
	// delegated to it, its depth and family turn budget.
	Parent *events.Parent `json:"parent,omitempty"`
	// Children lists the child runs this run started, in the order their
	// delegations were allowed.
	Children []ChildView `json:"children,omitempty"`
	// ForkedFrom is set on a run restarted from a finished run's turn
	// (docs/semantics.md §14): the parent run, the parent's version the
	// restart read and the turn the run asked again.
	ForkedFrom *events.ForkedFrom `json:"forked_from,omitempty"`
	// Restarted is who restarted it, why and when, with ForkedFrom
	// (Verified only when its recorded restart proof still verifies:
	// docs/security.md, "Who did it"); By is empty for a restart recorded
	// before restarts recorded who made them.
	Restarted *PersonView `json:"restarted,omitempty"`
	// Actions are the run's actions in the order the model asked for them.
	Actions []ActionView `json:"actions"`
	// Version is the version of the last event folded; Started and Updated
	// the recorded times of the first and last events.
	Version uint64    `json:"version"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

// Usage is the token usage of a run. Unreported counts replies that came
// without usage (never counted as zero tokens).
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Unreported   int   `json:"unreported_replies"`
}

// ActionView is one action of a run view.
type ActionView struct {
	// ID is the action id "<turn>/<call_id>".
	ID     string `json:"id"`
	Turn   int64  `json:"turn"`
	CallID string `json:"call_id"`
	// Tool is the tool name the model called; Arguments the JSON it sent.
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Approved are the arguments an approver narrowed the call to, which
	// the body got instead of Arguments (docs/semantics.md §4, "Approving
	// narrower arguments"); absent when nobody edited the call, and
	// cleared when its request is asked again before the call started
	// with them (that request approves the model's arguments unless its
	// answer edits them).
	Approved json.RawMessage `json:"approved_arguments,omitempty"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Detail explains terminal states without content: the validation
	// detail, the deny or reject reason, the not-started reason.
	Detail string `json:"detail,omitempty"`
	// Attempts counts started attempts (fences); Replays = Attempts - 1.
	Attempts int `json:"attempts"`
	Replays  int `json:"replays"`
	// Pending is the open approval request, if any.
	Pending *ApprovalView `json:"pending,omitempty"`
	// Approvals is the history of approval requests and their answers.
	Approvals []ApprovalView `json:"approvals"`
	// Evidence says why the effect is uncertain (or was, before a
	// reconciliation).
	Evidence string `json:"evidence,omitempty"`
	// UncertainSince is the recorded time the action became uncertain.
	UncertainSince *time.Time `json:"uncertain_since,omitempty"`
	// Reconciled is who reconciled the action (any kind), and why.
	Reconciled *PersonView `json:"reconciled,omitempty"`
	// Question is set once the action was reconciled as unconfirmed: the
	// open question (its note) and, once someone recorded the final truth,
	// its resolution.
	Question *QuestionView `json:"question,omitempty"`
	// SettleBy is, while the action is settling (a settling tool's body
	// was stopped), when its settle window closes: the run waits for the
	// tool's settlement until then, and the effect is uncertain after.
	SettleBy *time.Time `json:"settle_by,omitempty"`
	// Result is a summary of the content the model sees (at most
	// SummaryBytes bytes).
	Result string `json:"result,omitempty"`
	// Marked is, once recorded, the worker's late mark of the claim a close
	// found (events.AttemptNotStarted; docs/adr/0023-closing-attempts.md,
	// "Late evidence: a mark after the decision"): the action ended
	// not_started by it, or — an earlier attempt may have acted — it is the
	// evidence beside an uncertain one.
	Marked *MarkView `json:"marked_not_started,omitempty"`
	// Updated is the recorded time of the action's last change.
	Updated time.Time `json:"updated"`
}

// MarkView is a worker's late not-started mark as the run recorded it:
// which attempt, the worker that claimed it and never started its body,
// why ("ended", "stopped" or "deadline"), the runner that read the claim
// (By) and when it was recorded.
type MarkView struct {
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker"`
	Why     string    `json:"why"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// QuestionView is the open question an action reconciled as unconfirmed
// leaves (docs/semantics.md §3: the run goes on, the application tracks the
// question), and its resolution.
type QuestionView struct {
	// Note is the unconfirmed note the model read.
	Note string `json:"note"`
	// By is who reconciled (Verified: the deployment vouches for it);
	// Since when.
	By       string    `json:"by,omitempty"`
	Verified bool      `json:"verified,omitempty"`
	Since    time.Time `json:"since"`
	// Resolution is the final truth, once recorded (events.Resolved).
	Resolution *ResolutionView `json:"resolution,omitempty"`
}

// Open reports whether q is an open question: set and not resolved.
func (q *QuestionView) Open() bool { return q != nil && q.Resolution == nil }

// ResolutionView is the final truth recorded for an open question.
type ResolutionView struct {
	// Kind is "output" (the effect happened) or "error" (it did not).
	Kind string `json:"kind"`
	// Result summarizes the recorded content (at most SummaryBytes).
	Result string `json:"result"`
	// By is who resolved it (Verified: the deployment vouches for it;
	// Key: the verified proof's key, as for PersonView), Reason why; At
	// when.
	By       string    `json:"by,omitempty"`
	Verified bool      `json:"verified,omitempty"`
	Key      string    `json:"key,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Person is who resolved it, as a PersonView (its Describe says whether
// it is verified).
func (r ResolutionView) Person() PersonView {
	return PersonView{By: r.By, Verified: r.Verified, Key: r.Key, Reason: r.Reason, At: r.At}
}

// PersonView is who made a person's command (a reconciliation, a
// cancellation, a pause, a restart): By, the name recorded; Verified when the deployment
// vouched for it (a signed command proof by one of its person keys) and
// the proof, checked again here against what the log records, still
// verifies; Key the proof's key; Reason why; At when (docs/security.md,
// "Who did it").
type PersonView struct {
	By       string    `json:"by,omitempty"`
	Verified bool      `json:"verified,omitempty"`
	Key      string    `json:"key,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// ChildView is a child run started by one of the run's delegations.
type ChildView struct {
	// Action is the delegating action; Run the child run id; Agent the
	// child agent.
	Action string          `json:"action"`
	Run    string          `json:"run"`
	Agent  events.AgentRef `json:"agent"`
	// Outcome is the child's outcome once the delegation settled; Turns the
	// turns it spent; Detached marks a child the run stopped reading
	// because it finished first.
	Outcome  *events.Outcome `json:"outcome,omitempty"`
	Turns    int64           `json:"turns,omitempty"`
	Detached bool            `json:"detached,omitempty"`
}

// ApprovalView is one approval request of an action and its answer.
type ApprovalView struct {
	Revision    int                `json:"revision"`
	Requirement events.Requirement `json:"requirement"`
	Why         string             `json:"why"`
	Requested   time.Time          `json:"requested"`
	Expires     *time.Time         `json:"expires,omitempty"`
	// Answer is "", "approve", "reject" or "expired". An approval after
	// which the policy asked for another requirement keeps "approve", with
	// Reason "requirement changed to <name>": it authorised nothing, and
	// the action has a new request.
	Answer   string `json:"answer,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Reviewer string `json:"reviewer,omitempty"`
	Verifier string `json:"verifier,omitempty"`
	// Verified says the deployment vouched for Reviewer (a signed proof by
	// one of the approver's keys) and the proof verifies (Proof).
	Verified bool       `json:"verified,omitempty"`
	Answered *time.Time `json:"answered,omitempty"`
	// Proof is the signed approval proof the answer was given with, when
	// its approver takes signed proofs: the signer's key and whether the
	// proof verifies against the view's own record of the request and the
	// call, at the answer's time (package proof).
	Proof *ProofStatus `json:"proof,omitempty"`
	// Arguments are the edited arguments this approve narrowed the call
	// to (events.ApprovalAnswered.Arguments); absent for an answer to the
	// call as asked.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ProofStatus is the check of a recorded signed approval proof: Key signed
// it; Verified says whether it verifies, and Reason why not.
type ProofStatus struct {
	Key      string `json:"key"`
	Verified bool   `json:"verified"`
	Reason   string `json:"reason,omitempty"`
}

// proofStatus checks the signed proof p of answer to request h of action a
// of run, recorded at.
func proofStatus(run string, a *ActionView, h ApprovalView, answer string, p events.ApprovalProof, at time.Time) *ProofStatus {
	s := proof.Subject{Run: run, Action: a.ID, Revision: h.Revision, Requirement: h.Requirement, Tool: a.Tool, Arguments: a.Arguments, Answer: answer, Reason: h.Reason}.WithApproved(h.Arguments, a.Approved)
	st := &ProofStatus{Key: p.Key, Verified: true}
	if err := proof.Check(p, s, at); err != nil {
		st.Verified, st.Reason = false, err.Error()
	}
	return st
}

// Encode returns the view's deterministic JSON encoding.
func (v RunView) Encode() ([]byte, error) { return json.Marshal(v) }

// DecodeView decodes a view encoded by Encode.
func DecodeView(b []byte) (RunView, error) {
	var v RunView
	err := json.Unmarshal(b, &v)
	return v, err
}

// Fold builds the view of a run from its history, oldest first.
func Fold(history []events.Recorded) RunView {
	var v RunView
	for _, r := range history {
		v = Apply(v, r)
	}
	return v
}

// Apply folds one event into v and returns the new view. An event whose
// version is not v.Version+1 is ignored (a duplicate delivery or a gap the
// caller must fill by reading the log); so is an event of another run.
func Apply(v RunView, r events.Recorded) RunView {
	if r.Version != v.Version+1 || (v.Run != "" && r.Run != v.Run) {
		return v
	}
	v = v.clone()
	at := r.At.UTC()
	if v.Version == 0 {
		v.Schema = 1
		v.Run = r.Run
		v.Started = at
		v.Approvals, v.Uncertain, v.Actions = []string{}, []string{}, []ActionView{}
	}
	v.Version = r.Version
	v.Updated = at
	v.apply(r.Event, at)
	v.derive()
	return v
}

func (v *RunView) apply(e events.Event, at time.Time) {
	// The action's new state is the aggregate's transition (move); the
	// cases record what the view shows besides.
	t, moves := aggregate.ActionTransition(e)
	switch e := e.(type) {
	case events.RunStarted:
		v.Agent = e.Agent
		v.Input = e.Input
		v.Correlation = e.Correlation
		v.Runner = e.Runner
		v.Incarnation = 1
		if e.Parent != nil {
			p := *e.Parent
			v.Parent = &p
		}
	case events.RunForked:
		from := e.From
		v.ForkedFrom = &from
		v.Restarted = deed(v.Run, e, at)
	case events.ModelRequested:
		if e.Turn > v.Turns {
			v.Turns = e.Turn
		}
		v.ModelInFlight = true
	case events.ModelReplied:
		v.ModelInFlight = false
		if e.Usage != nil {
			v.Usage.InputTokens += e.Usage.InputTokens
			v.Usage.OutputTokens += e.Usage.OutputTokens
		} else {
			v.Usage.Unreported++
		}
		if !e.CreatesActions() {
			break
		}
		for _, c := range e.Calls {
			v.Actions = append(v.Actions, ActionView{
				ID: aggregate.ActionID(e.Turn, c.ID), Turn: e.Turn, CallID: c.ID, Tool: c.Name,
				Arguments: compact(c.Arguments), State: StateRequested,
				Approvals: []ApprovalView{}, Updated: at,
			})
		}
	case events.ModelFailed:
		// A retry keeps the model "in flight" until its delay has passed and
		// the next ModelRequested is recorded.
		v.ModelInFlight = e.RetryAt != nil
	case events.AnswerRejected:
		v.ModelInFlight = false
	case events.CallValidated:
		a := v.move(e.Action, at, t, moves)
		if a.Tool == "" {
			a.Tool = e.Tool
		}
		switch e.Outcome {
		case events.CallValid:
			if len(e.Normalized) > 0 {
				a.Arguments = compact(e.Normalized)
			}
		case events.CallUnknownTool, events.CallInvalidArguments, events.CallLimitReached:
			a.Detail = e.Detail
		}
	case events.PolicyDecided:
		a := v.move(e.Action, at, t, moves)
		if e.Decision == events.PolicyDeny {
			a.Detail, a.Pending = e.Reason, nil
		}
	case events.ApprovalRequested:
		a := v.move(e.Action, at, t, moves)
		req := ApprovalView{Revision: e.Revision, Requirement: e.Requirement, Why: e.Why, Requested: at, Expires: utc(e.Expires)}
		a.Approvals = append(a.Approvals, req)
		a.Pending = &req
		if !v.started(a) {
			// An edit the call never started with is not kept, as in the
			// aggregate (aggregate.Action.Started; docs/semantics.md §4).
			a.Approved = nil
		}
	case events.ApprovalAnswered:
		a := v.move(e.Action, at, t, moves)
		for i := range a.Approvals {
			if a.Approvals[i].Revision == e.Revision {
				h := &a.Approvals[i]
				h.Answer, h.Reason, h.Reviewer, h.Verifier, h.Arguments = e.Answer, e.Reason, e.Reviewer, e.Verifier, compact(e.Arguments)
				t := at
				h.Answered = &t
				if e.Proof != nil {
					h.Proof = proofStatus(v.Run, a, *h, e.Answer, *e.Proof, at)
				}
				h.Verified = answerProblem(e, h.Proof) == ""
			}
		}
		if a.Pending != nil && a.Pending.Revision == e.Revision {
			a.Pending = nil
		}
		if e.Answer == events.AnswerApprove && e.Arguments != nil {
			a.Approved = compact(e.Arguments)
		}
		switch e.Answer {
		case events.AnswerReject:
			a.Detail = e.Reason
		case events.AnswerExpired:
			a.Detail = "approval expired"
		}
	case events.RequirementChanged:
		a := v.move(e.Action, at, t, moves)
		for i := range a.Approvals {
			if a.Approvals[i].Revision == e.Revision && a.Approvals[i].Answer == events.AnswerApprove {
				a.Approvals[i].Reason = "requirement changed to " + e.To.Name
			}
		}
	case events.ActionQueued:
		a := v.move(e.Action, at, t, moves)
		a.Pending = nil
	case events.AttemptFenced:
		a := v.move(e.Action, at, t, moves)
		if a.Tool == "" {
			a.Tool = e.Tool
		}
		if e.Attempt > a.Attempts {
			a.Attempts = e.Attempt
		}
		a.Replays = max(a.Attempts-1, 0)
	case events.AttemptReported:
		a := v.move(e.Action, at, t, moves)
		switch e.Outcome {
		case events.OutcomeOutput:
			a.Result = summary(e.Content)
		case events.OutcomeExplain:
			a.Detail, a.Result = e.Message, summary(aggregate.ExplainContent(e.Message))
		case events.OutcomeUncertain:
			v.uncertain(a, e.Evidence, at)
		case events.OutcomeOversize:
			a.Detail = fmt.Sprintf("result of %d bytes over max result bytes", e.Bytes)
		}
	case events.AttemptLost:
		a := v.move(e.Action, at, t, moves)
		switch e.Next {
		case events.NextReplay, events.NextReapprove:
			a.Evidence = e.Evidence
		case events.NextSettle:
			a.Evidence, a.SettleBy = e.Evidence, utc(e.SettleBy)
		case events.NextUncertain:
			v.uncertain(a, e.Evidence, at)
		}
	case events.ActionUncertain:
		v.uncertain(v.move(e.Action, at, t, moves), e.Evidence, at)
	case events.SettlementAccepted:
		a := v.move(e.Action, at, t, moves)
		if e.Outcome == events.OutcomeUncertain && !e.Late {
			v.uncertain(a, e.Summary, at)
			break
		}
		content := e.Content
		if e.Outcome == events.OutcomeExplain {
			content = aggregate.ExplainContent(e.Message)
		}
		a.Result = summary(content)
	case events.Reconciled:
		a := v.move(e.Action, at, t, moves)
		a.Result = summary(e.Content)
		a.Reconciled = deed(v.Run, e, at)
		if e.Kind == events.ReconciledUnconfirmed {
			var c struct {
				Unconfirmed string `json:"unconfirmed"`
			}
			_ = json.Unmarshal(e.Content, &c)
			a.Question = &QuestionView{Note: c.Unconfirmed, By: e.By, Verified: a.Reconciled.Verified, Since: at}
		}
	case events.Resolved:
		a := v.move(e.Action, at, t, moves)
		if a.Question != nil {
			q := *a.Question
			p := deed(v.Run, e, at)
			q.Resolution = &ResolutionView{Kind: e.Kind, Result: summary(e.Content), By: e.By, Verified: p.Verified, Key: p.Key, Reason: e.Reason, At: at}
			a.Question = &q
		}
	case events.AttemptNotStarted:
		// A claim marked not started after the decision that found it
		// (docs/adr/0023-closing-attempts.md): with ended the uncertain
		// action ends not_started and leaves the inbox; on a live run the
		// model reads that the call did not run (aggregate.LateMarkContent).
		a := v.move(e.Action, at, t, moves)
		a.Marked = &MarkView{Attempt: e.Attempt, Worker: e.Worker, Why: e.Why, By: e.By, At: at}
		if e.Ended {
			a.Detail, a.Pending = events.NotStartedMarked, nil
			if c := aggregate.LateMarkContent(e, v.Outcome != nil, v.Cancelling); c != nil {
				a.Result = summary(c)
			}
		}
	case events.ActionsNotStarted:
		for _, id := range e.Actions {
			a := v.move(id, at, t, moves)
			a.Detail, a.Pending = e.Reason, nil
		}
	case events.CancelRequested:
		v.Cancelling = true
		v.Cancelled = deed(v.Run, e, at)
		v.ModelInFlight = false
	case events.RunPaused:
		p := deed(v.Run, e, at)
		v.Pause = &PauseView{By: p.By, Verified: p.Verified, Key: p.Key, Reason: e.Reason, Since: at}
	case events.RunResumed:
		v.Pause = nil
	case events.RunHandedOff:
		v.HandedOff = true
	case events.RunRecovered:
		v.HandedOff = false
		v.Incarnation = e.Incarnation
		v.Runner = e.Runner
	case events.ChildStarted:
		a := v.move(e.Action, at, t, moves)
		a.Pending = nil
		v.Children = append(v.Children, ChildView{Action: e.Action, Run: e.Child, Agent: e.Agent})
	case events.ChildSettled:
		a := v.move(e.Action, at, t, moves)
		if e.Bytes > 0 {
			a.Detail = fmt.Sprintf("child answer of %d bytes over max result bytes", e.Bytes)
		} else {
			a.Result = summary(e.Content)
		}
		for i := range v.Children {
			if v.Children[i].Action == e.Action {
				o := e.Outcome
				o.Answer = compact(o.Answer)
				v.Children[i].Outcome, v.Children[i].Turns, v.Children[i].Detached = &o, e.Turns, e.Detached
			}
		}
	case events.RunFinished:
		o := e.Outcome
		o.Answer = compact(o.Answer)
		v.Outcome = &o
		v.ModelInFlight = false
	}
}

// move returns the action with id (action) and gives it the state the
// aggregate's transition for the event leads to. The view is a reader, not
// a judge: it does not check the state the event met (Evolve does, and
// audit reports a history it refuses).
func (v *RunView) move(id string, at time.Time, t aggregate.Transition, moves bool) *ActionView {
	a := v.action(id, at)
	if moves && t.To != "" {
		a.State = string(t.To)
	}
	return a
}

// uncertain records why an action became uncertain (its state comes from
// the transition) and since when.
func (v *RunView) uncertain(a *ActionView, evidence string, at time.Time) {
	a.Evidence, a.Pending = evidence, nil
	t := at
	a.UncertainSince = &t
}

// action returns the action with id, adding it (with a turn and call id
// parsed from the id) when an event names an action the view has not seen.
func (v *RunView) action(id string, at time.Time) *ActionView {
	for i := range v.Actions {
		if v.Actions[i].ID == id {
			v.Actions[i].Updated = at
			return &v.Actions[i]
		}
	}
	a := ActionView{ID: id, State: StateRequested, Approvals: []ApprovalView{}, Updated: at}
	if turn, call, ok := strings.Cut(id, "/"); ok {
		a.CallID = call
		if n, err := strconv.ParseInt(turn, 10, 64); err == nil {
			a.Turn = n
		}
	}
	v.Actions = append(v.Actions, a)
	return &v.Actions[len(v.Actions)-1]
}

// derive recomputes the status and its lists from the rest of the view.
func (v *RunView) derive() {
	v.Approvals, v.Uncertain, v.Questions = []string{}, []string{}, nil
	inFlight := v.ModelInFlight
	for i := range v.Actions {
		if v.Actions[i].State != StateSettling {
			v.Actions[i].SettleBy = nil
		}
	}
	for _, a := range v.Actions {
		switch a.State {
		case StateAwaitingApproval:
			v.Approvals = append(v.Approvals, a.ID)
		case StateUncertain:
			v.Uncertain = append(v.Uncertain, a.ID)
		case StateReconciled:
			if a.Question.Open() {
				v.Questions = append(v.Questions, a.ID)
			}
		default:
			if aggregate.ActionState(a.State).Active() {
				inFlight = true
			}
		}
	}
	v.Status = string(aggregate.PausedStatus(aggregate.RunStatusOf(v.Outcome != nil, inFlight, len(v.Approvals) > 0 || len(v.Uncertain) > 0, v.HandedOff), v.Pause != nil, v.Cancelling))
}

// PauseView is who paused a run, why and when (RunPaused): Verified and
// Key as for PersonView (verified only when the pause's command proof
// checks).
type PauseView struct {
	By       string    `json:"by,omitempty"`
	Verified bool      `json:"verified,omitempty"`
	Key      string    `json:"key,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Since    time.Time `json:"since"`
}

// Person is who paused the run, as a PersonView.
func (p PauseView) Person() PersonView {
	return PersonView{By: p.By, Verified: p.Verified, Key: p.Key, Reason: p.Reason, At: p.Since}
}

// clone copies the slices Apply mutates so that a caller's view is never
// changed behind its back.
func (v RunView) clone() RunView {
	v.Approvals = append([]string(nil), v.Approvals...)
	v.Uncertain = append([]string(nil), v.Uncertain...)
	v.Questions = append([]string(nil), v.Questions...)
	acts := make([]ActionView, len(v.Actions))
	for i, a := range v.Actions {
		a.Approvals = append([]ApprovalView{}, a.Approvals...)
		if a.Pending != nil {
			p := *a.Pending
			a.Pending = &p
		}
		acts[i] = a
	}
	v.Actions = acts
	if v.Children != nil {
		v.Children = append([]ChildView(nil), v.Children...)
	}
	if v.Outcome != nil {
		o := *v.Outcome
		v.Outcome = &o
	}
	return v
}

// Action returns the action with id and whether the view has it.
func (v RunView) Action(id string) (ActionView, bool) {
	for _, a := range v.Actions {
		if a.ID == id {
			return a, true
		}
	}
	return ActionView{}, false
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// compact returns raw JSON without insignificant space, or raw itself when it
// is not valid JSON, so that a view encodes to the same bytes before and
// after a round trip.
func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		q, _ := json.Marshal(string(raw))
		return q
	}
	return b
}

// summary cuts content to SummaryBytes, at a rune boundary.
func summary(content json.RawMessage) string {
	s := string(compact(content))
	if len(s) <= SummaryBytes {
		return s
	}
	cut := SummaryBytes
	for cut > 0 && !runeStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }

// started reports whether action a started with its arguments: an attempt
// was fenced or a child run started (aggregate.Action.Started).
func (v *RunView) started(a *ActionView) bool {
	if a.Attempts > 0 {
		return true
	}
	for _, c := range v.Children {
		if c.Action == a.ID {
			return true
		}
	}
	return false
}
