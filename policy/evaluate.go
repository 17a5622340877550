package policy

import (
	"context"
	"fmt"
	"time"
)

// The causes of an EvaluationError.
const (
	// CauseError means the policy returned an error.
	CauseError = "error"
	// CausePanic means the policy panicked.
	CausePanic = "panic"
	// CauseTimeout means the policy did not answer within the policy timeout.
	CauseTimeout = "timeout"
	// CauseInvalid means the policy returned the zero Decision or a
	// RequireApproval without a requirement name.
	CauseInvalid = "invalid"
)

// EvaluationError is why Evaluate got no decision: the run fails closed
// (failed(policy_failed)) and no action of the batch starts.
type EvaluationError struct {
	// Action is the action id the policy was asked about.
	Action string
	// Cause is CauseError, CausePanic, CauseTimeout or CauseInvalid.
	Cause string
	// Err is the policy's error (CauseError) or a description.
	Err error
}

// Error returns "policy <cause> on action <id>: <err>".
func (e *EvaluationError) Error() string {
	return fmt.Sprintf("policy %s on action %s: %v", e.Cause, e.Action, e.Err)
}

// Unwrap returns Err.
func (e *EvaluationError) Unwrap() error { return e.Err }

// Evaluate asks p about action the way the runtime must: bounded by timeout
// (the agent's policy timeout), with a panic, an error, a late answer and an
// invalid decision all failing closed as an *EvaluationError. A policy still
// running at the timeout is abandoned (its context is cancelled) and its
// answer, if it ever comes, is ignored. ctx carries the reviewer on an
// approval's re-run (WithReview).
func Evaluate(ctx context.Context, p Policy, action Action, timeout time.Duration) (Decision, error) {
	if p == nil {
		return Decision{}, &EvaluationError{Action: action.ActionID, Cause: CauseInvalid, Err: fmt.Errorf("no policy")}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		d   Decision
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- answer{err: &EvaluationError{Action: action.ActionID, Cause: CausePanic, Err: fmt.Errorf("%v", r)}}
			}
		}()
		d, err := p.Decide(ctx, action)
		done <- answer{d: d, err: err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			if ee, ok := a.err.(*EvaluationError); ok {
				return Decision{}, ee
			}
			return Decision{}, &EvaluationError{Action: action.ActionID, Cause: CauseError, Err: a.err}
		}
		switch a.d.kind {
		case KindAllow, KindDeny:
			return a.d, nil
		case KindRequireApproval:
			if a.d.requirement.Name != "" {
				return a.d, nil
			}
			return Decision{}, &EvaluationError{Action: action.ActionID, Cause: CauseInvalid, Err: fmt.Errorf("require_approval without a requirement name")}
		}
		return Decision{}, &EvaluationError{Action: action.ActionID, Cause: CauseInvalid, Err: fmt.Errorf("the zero Decision is no decision")}
	case <-ctx.Done():
		return Decision{}, &EvaluationError{Action: action.ActionID, Cause: CauseTimeout, Err: ctx.Err()}
	}
}
