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

// WithGroupCommitTest is WithGroupCommit whose first batch waits until
// minQueue publishes are queued, and whose first loseAcks committed batches
// are answered as if their acknowledgement had been lost.
func WithGroupCommitTest(minQueue, loseAcks int) Option {
	return func(l *Log) {
		WithGroupCommit()(l)
		g := l.group
		g.minQueue, g.minGroup = minQueue, 2
		g.loseAcks.Store(int32(loseAcks))
	}
}

// NewGroupPublisherTest is NewGroupPublisher whose first batch waits until
// minQueue publishes are queued, and whose first loseAcks committed batches
// are answered as if their acknowledgement had been lost.
func NewGroupPublisherTest(js jetstream.JetStream, minQueue, loseAcks int) *GroupPublisher {
	p := NewGroupPublisher(js)
	p.g.minQueue, p.g.minGroup = minQueue, 2
	p.g.loseAcks.Store(int32(loseAcks))
	return p
}
