// Package groupcommit is group commit (docs/adr/0025-group-commit.md,
// docs/adr/0032-fewer-writes-per-run.md): the JetStream publishes of many
// runs that wait at the same time, when they are at least MinGroup, leave
// together as ONE atomic batch (headers Nats-Batch-Id, Nats-Batch-Sequence,
// Nats-Batch-Commit; the stream allows atomic publish). The server checks
// every message's headers, its expected last subject sequence included,
// and, under sync_interval: always, syncs the whole batch once. Each
// message is the very one its caller would publish alone, so every check
// (a run's optimistic concurrency, a claim's create-only) is unchanged.
//
// An atomic batch is stored whole or not at all. When it is refused (one
// message's check failed, a duplicate, a limit) or its acknowledgement
// does not come, each of its messages is published again on its own,
// under its caller's context, with its own message id and check: the one
// whose check failed gets its refusal, the others land (or, when the batch
// had landed after all, are answered "wrong last sequence" or as
// duplicates, and the caller finds its write, as for any lost
// acknowledgement). So one message's refusal costs the others one retry,
// never their write.
//
// The log's appends (eventlog.WithGroupCommit), the runner's stream copies
// of handed tasks (WEFT_TASKS) and the worker's claim creates
// (weft_claims) use it.
package groupcommit

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// PublishFunc is one message's publish, as js.PublishMsg.
type PublishFunc = func(context.Context, *nats.Msg) (*jetstream.PubAck, error)

// New returns a Publisher publishing on js: a batch with js's connection,
// a message alone with single (js.PublishMsg when nil).
func New(js jetstream.JetStream, single PublishFunc) *Publisher {
	if single == nil {
		single = func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) { return js.PublishMsg(ctx, m) }
	}
	return &Publisher{js: js, nc: js.Conn(), single: single, minGroup: MinGroup, now: time.Now}
}

// SetClock is a test hook: g reads the time from now. Call it before the
// first Publish.
func (g *Publisher) SetClock(now func() time.Time) { g.now = now }

// SetTest is a test hook: every flush waits until minQueue publishes are
// queued, a batch may be as small as 2, and the first loseAcks committed
// batches are answered as if their acknowledgement had been lost. Call it
// before the first Publish.
func (g *Publisher) SetTest(minQueue, loseAcks int) {
	g.minQueue, g.minGroup = minQueue, 2
	g.loseAcks.Store(int32(loseAcks))
}

// maxGroup is the most messages in one atomic batch (the server's default
// limit is 1000).
const maxGroup = 256

// MinGroup is the fewest messages sent as an atomic batch: a smaller
// group is published message by message, concurrently. On nats-server
// 2.15 an atomic batch of a file stream stages its messages in a store
// of its own, created, synced and deleted per batch, which costs about as
// much as a dozen fsyncs (docs/adr/0025-group-commit.md measures it).
const MinGroup = 16

// CoolDown is how long a Publisher publishes one by one after its stream
// refused an atomic batch because it does not allow atomic publish
// (10174): a stream not yet provisioned for it, or one a provisioning of
// an older release turned it off on. It then tries a batch again, so a
// process recovers its batching once the stream allows atomic publish
// again, at the cost of one refused batch (its messages sent again one by
// one) per CoolDown while it does not.
const CoolDown = time.Minute

// off reports whether g is in its cool-down.
func (g *Publisher) off() bool { return g.now().UnixNano() < g.offUntil.Load() }

// groupFlushers is how many batches of one Publisher may be in flight at once.
const groupFlushers = 2

// errCodeAtomicPublishDisabled is the server's JSAtomicPublishDisabledErr
// (10174): the stream does not allow atomic publish.
const errCodeAtomicPublishDisabled = 10174

// Stats counts, process-wide, what group commit sent.
type Stats struct {
	// Batches is how many atomic batches committed.
	Batches uint64
	// Batched is how many messages those batches held.
	Batched uint64
	// Retried is how many messages were published again on their own
	// after their batch was refused or not acknowledged.
	Retried uint64
}

var commitStats struct{ batches, batched, retried atomic.Uint64 }

// Read returns the process's group-commit counts.
func Read() Stats {
	return Stats{Batches: commitStats.batches.Load(), Batched: commitStats.batched.Load(), Retried: commitStats.retried.Load()}
}

// Publisher queues concurrent publishes and sends them in atomic batches.
type Publisher struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	single PublishFunc
	// offUntil (Unix nanoseconds) is when the cool-down after the
	// stream refused atomic publish ends: until then g publishes one by
	// one.
	offUntil atomic.Int64
	now      func() time.Time // time.Now; a test's clock (SetClock)
	// minGroup is the fewest messages sent as an atomic batch.
	minGroup int

	// Test hooks (SetTest): minQueue holds the first flush until
	// that many publishes wait; loseAcks answers that many committed
	// batches as if their acknowledgement had been lost.
	minQueue int
	loseAcks atomic.Int32

	mu       sync.Mutex
	queue    []*groupWait
	flushing int
}

type groupWait struct {
	ctx  context.Context
	msg  *nats.Msg
	ack  *jetstream.PubAck
	err  error
	done chan struct{}
}

// Publish publishes msg, alone or in an atomic batch with the concurrent
// publishes of g, and returns its acknowledgement. Its outcome is unknown
// when it returns ctx's error or a timeout, as for js.PublishMsg.
func (g *Publisher) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	if g.off() {
		return g.single(ctx, msg)
	}
	w := &groupWait{ctx: ctx, msg: msg, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	start := g.flushing < groupFlushers && len(g.queue) >= g.minQueue
	if start {
		g.flushing++
	}
	g.mu.Unlock()
	if start {
		go g.flush()
	}
	select {
	case <-w.done:
		return w.ack, w.err
	case <-ctx.Done():
		// Unknown outcome: the batch may still land; the caller
		// decides as for any publish without an acknowledgement.
		return nil, ctx.Err()
	}
}

// flush sends batches until the queue is empty.
func (g *Publisher) flush() {
	for {
		g.mu.Lock()
		batch := g.take()
		if len(batch) == 0 {
			g.flushing--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.send(batch)
	}
}

// take removes from the queue up to maxGroup waits whose caller still
// waits, at most one per subject among those that check their subject's
// last sequence (two decisions of one run in a batch would refuse it
// whole; the log's appends all check it). Called with mu held.
func (g *Publisher) take() []*groupWait {
	var batch, rest []*groupWait
	subjects := map[string]bool{}
	for _, w := range g.queue {
		checked := w.msg.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != ""
		switch {
		case w.ctx.Err() != nil:
			w.err = w.ctx.Err()
			close(w.done)
		case len(batch) < maxGroup && !(checked && subjects[w.msg.Subject]):
			if checked {
				subjects[w.msg.Subject] = true
			}
			batch = append(batch, w)
		default:
			rest = append(rest, w)
		}
	}
	g.queue = rest
	return batch
}

// send publishes batch: alone when it is one message, else as an atomic
// batch, and each message on its own when the batch fails.
func (g *Publisher) send(batch []*groupWait) {
	if len(batch) < g.minGroup || g.off() {
		g.each(batch)
		return
	}
	seq, stream, err := g.commit(batch)
	if err == nil && g.loseAcks.Load() > 0 {
		g.loseAcks.Add(-1)
		err = nats.ErrTimeout
	}
	if err != nil {
		commitStats.retried.Add(uint64(len(batch)))
		g.each(batch)
		return
	}
	commitStats.batches.Add(1)
	commitStats.batched.Add(uint64(len(batch)))
	first := seq - uint64(len(batch)-1)
	for i, w := range batch {
		w.ack = &jetstream.PubAck{Stream: stream, Sequence: first + uint64(i)}
		close(w.done)
	}
}

// each publishes every message of batch on its own, concurrently, each
// under its caller's context.
func (g *Publisher) each(batch []*groupWait) {
	if len(batch) == 1 {
		w := batch[0]
		w.ack, w.err = g.single(w.ctx, w.msg)
		close(w.done)
		return
	}
	var wg sync.WaitGroup
	for _, w := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.ack, w.err = g.single(w.ctx, w.msg)
			close(w.done)
		}()
	}
	wg.Wait()
}

// batchAck is the answer to an atomic batch's commit.
type batchAck struct {
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	Batch  string `json:"batch"`
	Count  int    `json:"count"`
	Error  *struct {
		Code    int    `json:"code"`
		ErrCode int    `json:"err_code"`
		Desc    string `json:"description"`
	} `json:"error"`
}

// errBatch is an atomic batch that did not commit.
type errBatch struct{ desc string }

func (e *errBatch) Error() string { return "groupcommit: atomic batch: " + e.desc }

// commit sends batch as one atomic batch and returns the stream sequence
// of its last message (the batch is stored contiguously) and the stream.
func (g *Publisher) commit(batch []*groupWait) (uint64, string, error) {
	// The earliest of the callers' deadlines bounds the commit.
	ctx := batch[0].ctx
	for _, w := range batch[1:] {
		if d, ok := w.ctx.Deadline(); ok {
			if cd, cok := ctx.Deadline(); !cok || d.Before(cd) {
				ctx = w.ctx
			}
		}
	}
	id := nuid.Next()
	for i, w := range batch {
		m := &nats.Msg{Subject: w.msg.Subject, Data: w.msg.Data, Header: make(nats.Header, len(w.msg.Header)+3)}
		for k, v := range w.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(batch)-1 {
			if err := g.nc.PublishMsg(m); err != nil {
				return 0, "", err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		resp, err := g.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return 0, "", err
		}
		var a batchAck
		if err := json.Unmarshal(resp.Data, &a); err != nil {
			return 0, "", &errBatch{desc: err.Error()}
		}
		if a.Error != nil {
			if a.Error.ErrCode == errCodeAtomicPublishDisabled {
				g.offUntil.Store(g.now().Add(CoolDown).UnixNano())
			}
			return 0, "", &errBatch{desc: a.Error.Desc}
		}
		if a.Batch != id || a.Count != len(batch) || a.Seq < uint64(len(batch)) {
			return 0, "", &errBatch{desc: "unexpected acknowledgement " + string(resp.Data)}
		}
		return a.Seq, a.Stream, nil
	}
	return 0, "", nil
}
