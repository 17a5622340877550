package projector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/backoff"
)

// WithoutIndex makes a projector keep no order index (weft_index): the
// projector as it was before the indexes, for the benchmark's baseline.
func WithoutIndex() Option { return func(p *Projector) { p.noIndex = true } }

// WithIndexPause makes the projector call f in the middle of every index
// move, between the two halves of it (the removal of the entries the new
// view no longer has and the puts of its new ones): what a reader sees
// while the projector writes.
func WithIndexPause(f func()) Option { return func(p *Projector) { p.between = f } }

// WithRewriteFault makes Rebuild call f after it stored a run's view and
// what derives from it, and fail that store with f's error: a write that
// landed but whose answer was lost.
func WithRewriteFault(f func(run string) error) Option {
	return func(p *Projector) { p.afterRewrite = f }
}

// WithBeforeRead makes the projector call f before each direct get
// request its reader sends (the reads of the items a run's inboxes
// hold), with the bucket read: the moment a test cuts the connection.
func WithBeforeRead(f func(bucket string)) Option {
	return func(p *Projector) { p.beforeRead = f }
}

// WithFeedHook makes the projector call f with each event its log
// subscription delivers, before the event is fed to the batches (or, in
// Rebuild, folded); ctx ends with the subscription. An f that waits for ctx is a subscription that
// stopped delivering.
func WithFeedHook(f func(ctx context.Context, se eventlog.StreamEvent)) Option {
	return func(p *Projector) { p.onFeed = f }
}

// WithStallAfter replaces StallAfter (three leases), how long the log may
// be ahead with nothing moving before the projector resumes from its
// checkpoint.
func WithStallAfter(d time.Duration) Option { return func(p *Projector) { p.stallAfter = d } }

// ErrStalled is the error a stalled follow or Rebuild ends with.
var ErrStalled = errStalled

// Supervise runs p as RunAll does (without the query service): until ctx
// ends, resuming it from its checkpoint after a pause whenever it stops
// on an error.
func Supervise(ctx context.Context, p *Projector) error { return p.supervise(ctx, backoff.Sleep) }

// BucketLastSeq is the last sequence of bucket's stream: how many writes
// it ever stored (a bucket keeps one value a key, but every write takes a
// sequence).
func BucketLastSeq(tb testing.TB, js jetstream.JetStream, bucket string) uint64 {
	tb.Helper()
	st, err := js.Stream(context.Background(), kvStream(bucket))
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.LastSeq
}
