package unanswered

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestIs: the server's silence is told from its refusals.
func TestIs(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("lookup: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionReconnecting, true},
		{&jetstream.APIError{Code: 503}, true},
		{jetstream.ErrStreamNotFound, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{errors.New("refused"), false},
		{nil, false},
	} {
		if got := Is(c.err); got != c.want {
			t.Errorf("Is(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
