package eventlog

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishFunc is Append's publish step.
type PublishFunc = func(context.Context, *nats.Msg) (*jetstream.PubAck, error)

// WithPublishWrapper wraps Append's publish step, so that tests can lose an
// acknowledgement after the real publish landed.
func WithPublishWrapper(wrap func(next PublishFunc) PublishFunc) Option {
	return func(l *Log) { l.publish = wrap(l.publish) }
}

// WithLoadBatch sets how many messages Load asks for per request.
func WithLoadBatch(n int) Option { return func(l *Log) { l.batch = n } }

// WithGroupCommitTest is WithGroupCommit whose flushes wait until
// minQueue publishes are queued, and whose first loseAcks committed batches
// are answered as if their acknowledgement had been lost.
func WithGroupCommitTest(minQueue, loseAcks int) Option {
	return func(l *Log) {
		WithGroupCommit()(l)
		l.group.SetTest(minQueue, loseAcks)
	}
}
