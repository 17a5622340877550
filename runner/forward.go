package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
)

// forwarded is the body of weft.runner.<id>.cmd: an API request routed to
// the run's driver.
type forwarded struct {
	Kind string          `json:"kind"`
	Run  string          `json:"run"`
	Body json.RawMessage `json:"body,omitempty"`
}

func (r *Runner) forward(ctx context.Context, driver, kind, id string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(forwarded{Kind: kind, Run: id, Body: body})
	fctx, cancel := context.WithTimeout(ctx, r.forwardTimeout())
	defer cancel()
	m, err := r.nc.RequestWithContext(fctx, ForwardPrefix+driver+".cmd", b)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// Nobody took it: the driver is going away; its lease expires
			// soon and the run is taken over; the caller retries.
			return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: its runner %s does not answer; retry", id, driver)}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout):
			return forwardUnknown(kind, id, driver)
		}
		return &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
	}
	if e := api.ReplyError(m); e != nil {
		return e // an unreadable reply is internal, as before
	}
	if out != nil {
		return json.Unmarshal(m.Data, out)
	}
	return nil
}

// forwardTimeout bounds the wait for a forwarded command's answer: twice
// the command timeout, within which a live driver applies or refuses it.
func (r *Runner) forwardTimeout() time.Duration { return 2 * r.commandTimeout() }

// ReasonForwardTimeout is the Reason of settle_unconfirmed when the
// settlement was forwarded to the run's driver and no answer came in time.
const ReasonForwardTimeout = "forward_timeout"

// ReasonAppendUnknown is the Reason of settle_unconfirmed when the
// settlement's append got no acknowledgement and the run could not be read
// to learn whether it landed.
const ReasonAppendUnknown = "append_unknown"

// forwardUnknown is the answer to a command of kind forwarded to driver
// that did not answer in time: the driver may have applied it, may apply
// it later, or never. A person's command is answered outcome_unknown, which
// is kept for its command id (a retry gets it again, never a different
// answer); a settlement is answered settle_unconfirmed; a report or a wake,
// idempotent by their content, unavailable (the sender retries).
func forwardUnknown(kind, id, driver string) error {
	msg := fmt.Sprintf("run %s: the command was forwarded to the run's runner %s, which did not answer in time; it may or may not have been applied (read the run)", id, driver)
	return unknownAnswer(kind, ReasonForwardTimeout, msg)
}

// unknownAnswer is the answer to a command of kind whose outcome is not
// known (msg says why): a person's command or a start is answered
// outcome_unknown, kept for its command id; a settlement
// settle_unconfirmed with reason; a report or a wake, idempotent by their
// content, unavailable (the sender retries).
func unknownAnswer(kind, reason, msg string) error {
	switch kind {
	case api.EndpointApprove, api.EndpointReject, api.EndpointDecide, api.EndpointReconcile, api.EndpointReconcileStored, api.EndpointResolve, api.EndpointCancel, api.EndpointStart,
		api.EndpointPause, api.EndpointResume, api.EndpointRestart:
		return &weft.Error{Code: weft.CodeOutcomeUnknown, Message: msg}
	case api.EndpointSettle:
		return &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: reason, Message: msg}
	}
	return &weft.Error{Code: weft.CodeUnavailable, Message: msg}
}

func (r *Runner) forwardWake(ctx context.Context, driver, id string) error {
	return r.forward(ctx, driver, "wake", id, struct{}{}, nil)
}

// onForward answers a command forwarded by another runner. Its goroutine
// belongs to Run, which waits for it before returning (r.handlers).
func (r *Runner) onForward(m *nats.Msg) {
	r.handlers.Add()
	go func() {
		defer r.handlers.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx, end := r.bounded(ctx)
		defer end()
		var f forwarded
		var rep any
		err := json.Unmarshal(m.Data, &f)
		if err == nil {
			rep, err = r.dispatchForwarded(ctx, f)
		}
		var body []byte
		if err != nil {
			var we *weft.Error
			if !errors.As(err, &we) {
				we = &weft.Error{Code: weft.CodeInternal, Message: err.Error()}
			}
			body, _ = json.Marshal(api.ErrorReply{Schema: api.Schema, Error: we})
		} else {
			body, _ = json.Marshal(rep)
		}
		_ = m.Respond(body)
	}()
}

// forwardedStart is the body of a start forwarded to the owner of the
// run's partition: the request, and the delegation of a child run; or,
// forwarded as a restart (kind api.EndpointRestart), with the fork.
type forwardedStart struct {
	Request api.StartRequest `json:"request"`
	Parent  *events.Parent   `json:"parent,omitempty"`
	// Fork is the restart a restarted run records (runner/restart.go).
	Fork *events.RunForked `json:"fork,omitempty"`
}

func decodeInto[T any](b json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

func (r *Runner) dispatchForwarded(ctx context.Context, f forwarded) (any, error) {
	switch f.Kind {
	case api.EndpointStart, api.EndpointRestart:
		req, err := decodeInto[forwardedStart](f.Body)
		if err != nil {
			return nil, err
		}
		if (req.Fork != nil) != (f.Kind == api.EndpointRestart) {
			// A restart is forwarded as a restart, a start as a start.
			return nil, &weft.Error{Code: weft.CodeInvalidRequest, Message: "forwarded " + f.Kind + " of run " + f.Run + ": a restart carries its fork, a start none"}
		}
		return r.startFork(ctx, req.Request, req.Parent, req.Fork)
	case "wake":
		return api.Reply{Schema: api.Schema, Run: f.Run}, r.wake(ctx, f.Run)
	case api.EndpointApprove:
		req, err := decodeInto[api.ApproveRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Approve(ctx, req)
	case api.EndpointReject:
		req, err := decodeInto[api.RejectRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Reject(ctx, req)
	case api.EndpointDecide:
		req, err := decodeInto[api.DecideRun](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Decide(ctx, req)
	case api.EndpointReconcile, api.EndpointReconcileStored:
		req, err := decodeInto[api.ReconcileRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Reconcile(ctx, req, f.Kind == api.EndpointReconcileStored)
	case api.EndpointSettle:
		req, err := decodeInto[api.Settlement](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Settle(ctx, req)
	case api.EndpointResolve:
		req, err := decodeInto[api.ResolveRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Resolve(ctx, req)
	case api.EndpointCancel:
		req, err := decodeInto[api.CancelRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Cancel(ctx, req)
	case api.EndpointPause:
		req, err := decodeInto[api.PauseRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Pause(ctx, req)
	case api.EndpointResume:
		req, err := decodeInto[api.ResumeRequest](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Resume(ctx, req)
	case api.EndpointReport:
		req, err := decodeInto[api.Report](f.Body)
		if err != nil {
			return nil, err
		}
		return r.Report(ctx, req)
	}
	return nil, &weft.Error{Code: weft.CodeInvalidRequest, Message: "unknown forwarded command " + f.Kind}
}
