// Package unanswered tells a NATS or JetStream call the server did not
// answer (it is down or restarting) from one it refused: the first is
// tried again, the second is an answer.
package unanswered

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Is reports whether err means the server did not answer (it is down or
// restarting), not that it refused.
func Is(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503
	}
	return false
}
