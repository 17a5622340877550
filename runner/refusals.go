package runner

// Internal refusals: a decision the runtime derived itself that the
// decision core refused (docs/semantics.md §8, "A run can always be answered").

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
)

// internalRefusalError is the answer to a command whose run met an
// internal refusal: code internal (Unwrap), never the refusal's own code,
// which would tell the caller its well-formed request was malformed. A
// worker's report or settlement answers runner_busy instead (busyIfInternal),
// so that the worker keeps and retries it.
type internalRefusalError struct{ err *weft.Error }

func (e *internalRefusalError) Error() string { return e.err.Error() }
func (e *internalRefusalError) Unwrap() error { return e.err }

// derived reports whether c is a command the runtime derives itself from
// the log or from its own work — a timer's firing, the resolution of a
// tool request, a model's answer, a hand-off, a takeover on its own
// (nil) — rather than one a person or a worker sent.
func derived(c aggregate.Command) bool {
	switch c.(type) {
	case nil, aggregate.TimerFired, aggregate.ResolveCalls, aggregate.ModelReply, aggregate.ModelFailure,
		aggregate.HandOff, aggregate.Recover:
		return true
	}
	return false
}

// internalRefusal reports whether err, the decision core's refusal of a
// decision the runtime derived, says the decision was malformed or
// impossible (invalid_request, internal): the runtime's own inconsistency,
// never a caller's fault.
func internalRefusal(err error) bool {
	var we *weft.Error
	if !errors.As(err, &we) {
		return false
	}
	return we.Code == weft.CodeInvalidRequest || we.Code == weft.CodeInternal
}

// refused handles an internal refusal of what (a command name) on run id:
// it logs it at error level, counts it (Stats.InternalRefusals, telemetry
// weft.runner.internal_refusals), drops rn (when not nil) from memory and
// wakes the run again after a backoff (retryLater), so that its work is
// derived again from its log — none of it is dropped — and returns the
// answer (internalRefusalError).
func (r *Runner) refused(ctx context.Context, id string, rn *run, what string, err error) error {
	r.log.Error("internal refusal: the decision core refused a decision the runtime derived", "run", id, "command", what, "err", err)
	r.internalRefusals.Add(1)
	r.tel.InternalRefusal(ctx, what, string(weft.ErrorCode(err)))
	if rn != nil {
		r.drop(rn)
		r.retryLater(id)
	}
	return &internalRefusalError{&weft.Error{Code: weft.CodeInternal, Message: fmt.Sprintf(
		"run %s: the runtime's own %s decision was refused (%v); the run is read again from its log", id, what, err)}}
}

// busyIfInternal turns the answer to an internal refusal into runner_busy
// (retry it) for a worker's report or settlement, which a worker drops on
// any other refusal: its result is never lost to the runtime's own error.
func busyIfInternal(err error) error {
	var ir *internalRefusalError
	if errors.As(err, &ir) {
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: ir.err.Message + "; retry"}
	}
	return err
}

// retryTimer reports whether a timer's firing that ended with err is to
// be fired again later: its decision could not be recorded (transient),
// or it met an internal refusal, whose run is read again from its log.
func retryTimer(err error) bool {
	return transient(err) || weft.ErrorCode(err) == weft.CodeInternal
}
