package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Decision is one decision of AppendBatch: Events appended to Run, only if
// the run's head is still Head, recorded at At, sealed by Seal when it is
// set (as AppendSealed).
type Decision struct {
	Run    string
	Head   Head
	At     time.Time
	Events []events.Event
	Seal   Seal
}

// Appended is the outcome of one Decision of AppendBatch: the stored
// envelopes and the run's new head, or Err.
type Appended struct {
	Envelopes []events.Envelope
	Head      Head
	Err       error
}

// AppendBatch appends many decisions of different runs, each exactly as
// Append would (the same message, stamps and per-run expected-sequence
// check), but with asynchronous publishes: every message is sent before
// any acknowledgement is awaited, so a batch costs about one round trip
// instead of one per decision. It is for loaders and imports that extend
// many runs at once; a runner deciding one run uses Append.
//
// The outcomes are in the order of ds. Err is a *ConflictError when the
// run's head was no longer Head (nothing was written for it), a
// *weft.Error invalid_request for a second decision of the same run in one
// batch (it needs the sequence of the first: put it in the next batch),
// invalid_name, payload_too_large, ErrEmpty or a *NotSentError as for
// Append, and unavailable (or ctx's error) when no acknowledgement came:
// unlike Append, AppendBatch does not retry, so that outcome is unknown
// and the run's head must be read again (Head) before deciding again. At
// most the js's asynchronous pending limit
// (jetstream.WithPublishAsyncMaxPending, default 4000) messages are in
// flight; a larger batch waits for acknowledgements as it goes.
func (l *Log) AppendBatch(ctx context.Context, ds []Decision) []Appended {
	out := make([]Appended, len(ds))
	futs := make([]jetstream.PubAckFuture, len(ds))
	seen := make(map[string]bool, len(ds))
	for i, d := range ds {
		if err := CheckRun(d.Run); err != nil {
			out[i].Err = err
			continue
		}
		if len(d.Events) == 0 {
			out[i].Err = ErrEmpty
			continue
		}
		if seen[d.Run] {
			out[i].Err = &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("run %s has two decisions in one batch", d.Run)}
			continue
		}
		seen[d.Run] = true
		msg, envs, hash, err := l.encode(d.Run, d.Head, d.At, d.Events, d.Seal)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Envelopes, out[i].Head.Hash = envs, hash
		f, err := l.js.PublishMsgAsync(msg)
		if err != nil {
			out[i] = Appended{Err: l.publishError(d, len(envs), len(msg.Data), err)}
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		d := ds[i]
		select {
		case ack := <-f.Ok():
			last := out[i].Envelopes[len(out[i].Envelopes)-1]
			out[i].Head = Head{Version: last.Version, Seq: ack.Sequence, Hash: out[i].Head.Hash}
		case err := <-f.Err():
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && isSequenceConflict(apiErr.ErrorCode) {
				cur, herr := l.head(ctx, d.Run)
				if herr != nil {
					out[i] = Appended{Err: herr}
					continue
				}
				out[i] = Appended{Err: &ConflictError{Run: d.Run, Expected: d.Head, Current: cur}}
				continue
			}
			out[i] = Appended{Err: l.publishError(d, len(out[i].Envelopes), len(f.Msg().Data), err)}
		case <-ctx.Done():
			for j := i; j < len(futs); j++ {
				if futs[j] != nil {
					out[j] = Appended{Err: ctx.Err()}
				}
			}
			return out
		}
	}
	return out
}

// publishError codes err, the failed publish of d's message of n events
// (its seal included) and size bytes.
func (l *Log) publishError(d Decision, n, size int, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("decision of %d events is %d bytes: %v", n, size, err)}
	}
	return fmt.Errorf("eventlog: append run %s: %w", d.Run, unavailable(err))
}
