package worker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
)

// Reasons of a settle_unconfirmed refusal that no runner gave (SettleError);
// a refusal a runner gave keeps its code as the Reason.
const (
	// ReasonNoResponders means no runner answered weft.api.settle; nothing
	// was recorded.
	ReasonNoResponders = "no_responders"
	// ReasonTimeout means no answer came before the context's deadline;
	// whether the run recorded the settlement is unknown.
	ReasonTimeout = "timeout"
	// ReasonCancelled means the context was cancelled before an answer;
	// whether the run recorded the settlement is unknown.
	ReasonCancelled = "cancelled"
	// ReasonTransport means the request or its reply failed in transit,
	// or the reply could not be read (api.ReasonUnreadableReply); whether
	// the run recorded the settlement is unknown.
	ReasonTransport = "transport"
)

// SettleError maps the error of a settlement to the closed set a tool's
// settlement promises (docs/semantics.md §9, tools.SettleFunc): nil, or a
// *weft.Error with code already_recorded, not_awaited or
// settle_unconfirmed, which pass unchanged. A run that cannot await it any
// more (run_ended, unknown_run, wrong_reference, stale_reference) becomes
// not_awaited with that code as Reason: a person must reconcile. Every other
// error becomes settle_unconfirmed: with the refusing code as Reason
// (runner_busy, contended, conflict, unavailable, payload_too_large, …: not
// recorded), or ReasonNoResponders, ReasonTimeout, ReasonCancelled or
// ReasonTransport when no runner answered. Offering the same settlement
// again is safe: a recorded one is refused already_recorded.
func SettleError(err error) error {
	if err == nil {
		return nil
	}
	var we *weft.Error
	if errors.As(err, &we) && we.Code == weft.CodeInternal && we.Reason == api.ReasonUnreadableReply {
		// A reply that could not be read: the run may have recorded the
		// settlement (api.ReplyError), as when the reply was lost.
		return &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: ReasonTransport, Message: err.Error()}
	}
	if errors.As(err, &we) {
		switch we.Code {
		case weft.CodeAlreadyRecorded, weft.CodeNotAwaited, weft.CodeSettleUnconfirmed:
			return we
		case weft.CodeRunEnded, weft.CodeUnknownRun, weft.CodeWrongReference, weft.CodeStaleReference:
			return &weft.Error{Code: weft.CodeNotAwaited, Reason: string(we.Code), Message: we.Error()}
		}
		return &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: string(we.Code), Message: "the settlement was not recorded: " + we.Error()}
	}
	reason := ReasonTransport
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		reason = ReasonNoResponders
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		reason = ReasonTimeout
	case errors.Is(err, context.Canceled):
		reason = ReasonCancelled
	}
	return &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: reason, Message: err.Error()}
}
