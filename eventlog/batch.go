package eventlog

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// batchReader sends batched direct gets ($JS.API.DIRECT.GET.<stream> with
// "batch") and collects their answers through ONE subscription per Log, on
// a wildcard inbox, with a token per request: no subscription is created
// or torn down per read (a per-request subscription, as a generic batch
// client makes, allocates a channel for 512 Ki messages each time).
type batchReader struct {
	nc *nats.Conn

	once   sync.Once
	err    error
	prefix string // <inbox>.
	sub    *nats.Subscription
	next   atomic.Uint64

	mu    sync.Mutex
	waits map[string]*batchWait
}

// batchWait collects the answer of one request.
type batchWait struct {
	mu   sync.Mutex
	msgs []*nats.Msg
	done bool
	ch   chan struct{} // closed once the last message arrived
}

func (r *batchReader) init() error {
	r.once.Do(func() {
		r.prefix = r.nc.NewRespInbox() + "."
		r.waits = map[string]*batchWait{}
		r.sub, r.err = r.nc.Subscribe(r.prefix+"*", r.on)
		if r.err == nil {
			// The answers of one request must not be dropped: an
			// unbounded buffer (they are bounded by the batch sizes asked).
			r.err = r.sub.SetPendingLimits(-1, -1)
		}
	})
	return r.err
}

func (r *batchReader) on(m *nats.Msg) {
	token := m.Subject[len(r.prefix):]
	r.mu.Lock()
	w := r.waits[token]
	r.mu.Unlock()
	if w == nil {
		return // an abandoned request
	}
	last := m.Header.Get("Status") != "" // EOB (204), or 404 / an error instead of messages
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.msgs = append(w.msgs, m)
	if last {
		w.done = true
		close(w.ch)
	}
}

// errBatchStatus is a direct get answered with an unexpected status.
type errBatchStatus struct{ status, desc string }

func (e *errBatchStatus) Error() string {
	return fmt.Sprintf("direct get: status %s %s", e.status, e.desc)
}

// get asks stream for up to batch messages of filter from sequence seq
// and returns them in order (none when there are none).
func (r *batchReader) get(ctx context.Context, stream string, seq uint64, filter string, batch int, timeout time.Duration) ([]*nats.Msg, error) {
	if err := r.init(); err != nil {
		return nil, err
	}
	token := strconv.FormatUint(r.next.Add(1), 36)
	w := &batchWait{ch: make(chan struct{})}
	r.mu.Lock()
	r.waits[token] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waits, token)
		r.mu.Unlock()
	}()
	body := fmt.Appendf(nil, `{"seq":%d,"next_by_subj":%q,"batch":%d}`, seq, filter, batch)
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, r.prefix+token, body); err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nats.ErrTimeout
	}
	w.mu.Lock()
	msgs := w.msgs
	w.mu.Unlock()
	last := msgs[len(msgs)-1]
	switch st := last.Header.Get("Status"); {
	case st == "204": // end of batch
		return msgs[:len(msgs)-1], nil
	case st == "404" && len(msgs) == 1:
		return nil, nil
	case st == "503" && len(msgs) == 1:
		return nil, nats.ErrNoResponders
	default:
		return nil, &errBatchStatus{status: st, desc: last.Header.Get("Description")}
	}
}
