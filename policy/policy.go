// Package policy decides whether an action the model asked for may run.
//
// Every agent has a Policy; there is no implicit allow. The runtime asks it
// once for each call whose arguments validated (unknown tools and invalid
// arguments never reach it), and again when a person approves an action, this
// time with the approver's context (see Reviewer). The runtime asks before it
// records the call: a policy may be asked about an action that never reaches
// the log (the model's reply could not be recorded, or another runner
// recorded the run's next decision) and more than once about the same action
// (the reply is recorded, and its calls decided, again by a later pass).
// Only a decision recorded in the log takes effect, so a policy must have no
// effect of its own. A Policy answers with a Decision:
//
//   - Allow: the action is queued and runs.
//   - Deny(reason): the action ends denied; the model sees
//     {"error":"denied","detail":reason} and the run continues.
//   - RequireApproval(requirement): the action waits for a person whose proof
//     satisfies the requirement (see package approvers).
//
// An error, a panic or a run past the agent's policy timeout fails the run
// closed (failed(policy_failed)); no action of the batch starts.
//
// A policy must be deterministic in what it is given: it reads the Action and
// the context, not a clock or a random source, so that the decision recorded
// in the log is the one any runner would make.
package policy

import (
	"context"
	"encoding/json"
	"strconv"
)

// Target is what an action starts: a tool body or a sub-agent run.
type Target string

// The targets of an action.
const (
	// TargetTool is an action that runs a tool's body.
	TargetTool Target = "tool"
	// TargetAgent is an action that starts a sub-agent run (a delegation).
	TargetAgent Target = "agent"
)

// Action is what a policy decides on: one call the model asked for, after its
// arguments were validated.
type Action struct {
	// Run is the run id.
	Run string
	// ActionID is the action id, "<turn>/<call id>".
	ActionID string
	// Tool is the name of the tool (or sub-agent) called.
	Tool string
	// Arguments is the exact validated arguments JSON (normalized by the
	// tool's input codec). Decode it with tools.Input.
	Arguments json.RawMessage
	// Decoded is Arguments already decoded into the tool's Go input type
	// by the validation that accepted them in this process
	// (tools.Arguments.Decoded), or the zero Decoded, as for an action
	// read back from the log. tools.Input returns it instead of decoding
	// Arguments again.
	Decoded Decoded
	// Asked are the arguments the model asked for, set only when the
	// policy is re-run for an approve and the call runs with an approver's
	// edit (docs/semantics.md §4, "Approving narrower arguments"):
	// Arguments are then the edit. Nil when the call runs as the model
	// asked it. The runtime checks only that an edit fits the tool's input
	// schema; a policy that must hold an edit narrower than the request (a
	// lower amount, the same payee) compares the two and denies the rest
	// (docs/security.md, "Approving narrower arguments").
	Asked json.RawMessage
	// Target says what the action starts.
	Target Target
}

// Decoded holds an action's arguments decoded into the tool's Go input
// type by the validation that accepted them, so that the policy's typed
// match (tools.Input) does not parse the JSON again (docs/adr/0022). The
// zero Decoded holds nothing. Build one with DecodedOf, read it with
// DecodedAs.
type Decoded struct{ v any }

// DecodedOf returns the Decoded holding v.
func DecodedOf[T any](v T) Decoded { return Decoded{v: v} }

// DecodedAs returns the value d holds, and true, when it is a T.
func DecodedAs[T any](d Decoded) (T, bool) {
	v, ok := d.v.(T)
	return v, ok
}

// Requirement names what an approval must satisfy: a requirement name (say
// "payments_over_1000") and its version. Raising the version invalidates
// pending approvals of the old one (requirement_changed). Its fields and
// JSON form are those of events.Requirement, so the two convert directly.
type Requirement struct {
	// Name identifies the requirement; approvers are asked to prove it.
	Name string `json:"name"`
	// Version is the requirement's version.
	Version int `json:"version"`
}

// Kind is the closed set of decisions.
type Kind string

// The kinds of Decision. The zero Kind is no decision: the runtime treats it
// as a policy error.
const (
	KindAllow           Kind = "allow"            // KindAllow is the kind of Allow.
	KindDeny            Kind = "deny"             // KindDeny is the kind of Deny.
	KindRequireApproval Kind = "require_approval" // KindRequireApproval is the kind of RequireApproval.
)

// Decision is a policy's answer for one action: Allow, Deny or
// RequireApproval. The zero Decision is invalid and fails the run closed,
// like a policy error.
type Decision struct {
	kind        Kind
	reason      string
	requirement Requirement
}

// Allow returns the decision that lets the action run.
func Allow() Decision { return Decision{kind: KindAllow} }

// Deny returns the decision that refuses the action; the model sees reason
// as the detail of {"error":"denied"}, so it must carry no secrets.
func Deny(reason string) Decision { return Decision{kind: KindDeny, reason: reason} }

// RequireApproval returns the decision that makes the action wait for a
// person whose proof satisfies requirement.
func RequireApproval(requirement Requirement) Decision {
	return Decision{kind: KindRequireApproval, requirement: requirement}
}

// Kind returns the decision's kind; "" for the zero Decision.
func (d Decision) Kind() Kind { return d.kind }

// Reason returns a Deny's reason.
func (d Decision) Reason() string { return d.reason }

// Requirement returns a RequireApproval's requirement.
func (d Decision) Requirement() Requirement { return d.requirement }

// String returns "allow", "deny(reason)" or "require_approval(name v1)".
func (d Decision) String() string {
	switch d.kind {
	case KindAllow:
		return "allow"
	case KindDeny:
		return "deny(" + d.reason + ")"
	case KindRequireApproval:
		return "require_approval(" + d.requirement.Name + " v" + strconv.Itoa(d.requirement.Version) + ")"
	}
	return "invalid"
}

// Policy decides on actions. Decide must honour ctx (the agent's policy
// timeout) and be deterministic in its inputs. An error stops the run
// (failed(policy_failed)); so does a panic.
type Policy interface {
	// Decide returns the decision for action.
	Decide(ctx context.Context, action Action) (Decision, error)
}

// Func adapts a function to a Policy.
type Func func(ctx context.Context, action Action) (Decision, error)

// Decide calls f(ctx, action).
func (f Func) Decide(ctx context.Context, action Action) (Decision, error) { return f(ctx, action) }

// AlwaysAllow returns a Policy that allows every action. Use it for agents
// whose tools only read, and in tests.
func AlwaysAllow() Policy {
	return Func(func(context.Context, Action) (Decision, error) { return Allow(), nil })
}

// Review is the approval a policy is re-run for: who approved, which
// approver verified them, and the requirement and revision they approved.
type Review struct {
	// Reviewer is the person (or system) the approver authenticated.
	Reviewer string
	// Verifier is the name of the approver that verified the proof.
	Verifier string
	// Requirement is the requirement the proof was given for.
	Requirement Requirement
	// Revision is the approval request's revision.
	Revision int
}

type reviewKey struct{}

// WithReview returns a context carrying r. The runtime calls it before it
// re-runs the policy for an approval, and runs the approved body with that
// context.
func WithReview(ctx context.Context, r Review) context.Context {
	return context.WithValue(ctx, reviewKey{}, r)
}

// Reviewer returns the approval the policy is re-run for, and false when the
// policy runs at the model's request (no approval yet). A policy may decide
// differently with a reviewer: deny a reviewer approving their own request,
// or require a higher requirement above their limit.
func Reviewer(ctx context.Context) (Review, bool) {
	r, ok := ctx.Value(reviewKey{}).(Review)
	return r, ok
}
