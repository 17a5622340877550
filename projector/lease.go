package projector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/protocol"
)

// BucketLease holds the projector lease: key KeyLeaseHolder names the one
// projector that writes the read models (docs/adr/0020, "one projector at
// a time"). The bucket's max age is Lease, so the key of a holder that
// stopped renewing expires; a holder that stops deletes it.
const BucketLease = protocol.ProjectorLeaseBucket

// KeyLeaseHolder is the lease's key in BucketLease; its value is the
// holder's id.
const KeyLeaseHolder = "holder"

// Lease is how long the projector lease lasts without a renewal (the max
// age of BucketLease). The holder renews it every Lease/4 and stops
// writing once Lease*3/4 has passed since the last renewal it sent, so it
// has stopped before the key can expire and a standby take over.
const Lease = 10 * time.Second

// errLeaseLost ends a projector's Run when its lease was taken or could
// not be renewed in time.
var errLeaseLost = errors.New("projector: the projector lease was lost")

// lease is a projector's hold on BucketLease.
type lease struct {
	kv jetstream.KeyValue
	id string

	mu   sync.Mutex
	rev  uint64
	sent time.Time // when the last successful put of the lease was sent
}

func newLease(kv jetstream.KeyValue) *lease {
	return &lease{kv: kv, id: rand.Text()}
}

// holds reports whether the lease is still certainly this projector's:
// less than Lease*3/4 since the last renewal that succeeded was sent.
func (l *lease) holds() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev != 0 && time.Since(l.sent) < Lease*3/4
}

// acquire takes the lease, waiting while another projector holds it
// (standing by: it retries every Lease/4, and at once when the holder
// releases it). standby is called once, with the holder's id, when it
// has to wait.
func (l *lease) acquire(ctx context.Context, standby func(holder string)) error {
	w, err := l.kv.Watch(ctx, KeyLeaseHolder, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("projector: watch %s: %w", BucketLease, err)
	}
	defer w.Stop()
	// A watch that ends (its consumer lost and not created again) is no
	// longer waited on: the retry every Lease/4 remains.
	released := w.Updates()
	waited := false
	for {
		sent := time.Now()
		rev, err := l.kv.Create(ctx, KeyLeaseHolder, []byte(l.id))
		if err == nil {
			l.mu.Lock()
			l.rev, l.sent = rev, sent
			l.mu.Unlock()
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("projector: take the lease in %s: %w", BucketLease, err)
		}
		if !waited {
			waited = true
			holder := "?"
			if e, err := l.kv.Get(ctx, KeyLeaseHolder); err == nil {
				holder = string(e.Value())
			}
			standby(holder)
		}
		t := time.NewTimer(Lease / 4)
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
				break wait
			case e, ok := <-released:
				if !ok {
					released = nil
					continue
				}
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					t.Stop()
					break wait
				}
			}
		}
	}
}

// renew keeps the lease until ctx ends, renewing it every Lease/4; it
// calls lost when another projector took it or when a renewal did not
// succeed in time.
func (l *lease) renew(ctx context.Context, lost func(error)) {
	t := time.NewTicker(Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		rev := l.rev
		l.mu.Unlock()
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, Lease/4)
		nrev, err := l.kv.Update(rctx, KeyLeaseHolder, []byte(l.id), rev)
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.rev, l.sent = nrev, sent
			l.mu.Unlock()
		case ctx.Err() != nil:
			return
		case isWrongSequence(err) || errors.Is(err, jetstream.ErrKeyNotFound) || !l.holds():
			lost(fmt.Errorf("%w: %v", errLeaseLost, err))
			return
		}
	}
}

// release gives the lease up (a standby takes it at once), if it is
// still this projector's.
func (l *lease) release() {
	l.mu.Lock()
	rev := l.rev
	l.rev = 0
	l.mu.Unlock()
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, KeyLeaseHolder, jetstream.LastRevision(rev))
}
