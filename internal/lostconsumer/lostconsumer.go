// Package lostconsumer stops a pull consume whose durable consumer the
// server no longer has, so that its owner makes the consumer again.
//
// A consumer deleted while its pulls wait ends the consume by itself: the
// server says so (409 Consumer Deleted) and the consume's Closed channel
// ends. A consumer a server lost — it restarted without it, its stream in
// memory or made again while the client was away — says nothing: the
// consume goes on pulling from nothing for ever, its pulls unanswered and
// its heartbeats missed. StopWhenGone looks the consumer up on either sign
// and stops the consume when the consumer or its stream is gone, so that
// the owner's wait on Closed ends as for a deletion.
package lostconsumer

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lookupWait bounds the consumer's lookup.
const lookupWait = 2 * time.Second

// StopWhenGone is the consume option (c.Consume) that stops the consume of
// c when a missed heartbeat or an unanswered pull finds c gone from the
// server. gone, when not nil, is called before the stop with the error
// that made it look.
func StopWhenGone(c jetstream.Consumer, gone func(err error)) jetstream.PullConsumeOpt {
	return jetstream.ConsumeErrHandler(func(cc jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) && !errors.Is(err, nats.ErrNoResponders) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
		defer cancel()
		if _, ierr := c.Info(ctx); errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound) {
			if gone != nil {
				gone(err)
			}
			cc.Stop()
		}
	})
}
