package eventlog

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Group commit (docs/adr/0025-group-commit.md): with WithGroupCommit, the
// publishes of Appends that wait at the same time, when they are at least
// minGroup, leave together as ONE JetStream atomic batch (headers Nats-Batch-Id, Nats-Batch-Sequence,
// Nats-Batch-Commit; the stream allows atomic publish). The server checks
// every message's headers, its expected last subject sequence included,
// and, under sync_interval: always, syncs the whole batch once. Each
// message is the very one Append would publish alone, so per-run
// optimistic concurrency is unchanged.
//
// An atomic batch is stored whole or not at all. When it is refused (one
// run's head moved, a duplicate, a limit) or its acknowledgement does not
// come, each of its messages is published again on its own, with its own
// message id and check: the run whose head moved gets its conflict, the
// others land (or, when the batch had landed after all, are answered
// "wrong last sequence" and Append finds its message id in the log, as for
// any lost acknowledgement). So one run's conflict costs the others one
// retry, never their decision.

// maxGroup is the most messages in one atomic batch (the server's default
// limit is 1000).
const maxGroup = 256

// minGroup is the fewest messages sent as an atomic batch: a smaller
// group is published message by message, concurrently. On nats-server
// 2.15 an atomic batch of a file stream stages its messages in a store
// of its own, created, synced and deleted per batch, which costs about as
// much as a dozen fsyncs (docs/adr/0025-group-commit.md measures it).
const minGroup = 16

// groupFlushers is how many batches of one Log may be in flight at once.
const groupFlushers = 2

// errCodeAtomicPublishDisabled is the server's JSAtomicPublishDisabledErr
// (10174): the stream does not allow atomic publish.
const errCodeAtomicPublishDisabled = 10174

// WithGroupCommit makes the Appends of this Log that wait at the same time
// leave together as one atomic batch when there are 16 or more of them
// (fewer are published one by one, concurrently; see CommitStats). It
// pays on a server with sync_interval: always, where a batch is one fsync;
// on one that syncs on its interval a batch costs more than it saves. On a stream that
// does not allow atomic publish the Log falls back to one publish per
// Append after the first refusal.
func WithGroupCommit() Option {
	return func(l *Log) {
		g := &grouper{js: l.js, nc: l.js.Conn(), single: l.publish, minGroup: minGroup}
		l.group, l.publish = g, g.publish
	}
}

// GroupPublisher is group commit for writes of many runs other than the
// log's appends that wait at the same time: the stream copies of
// dispatched tasks (WEFT_TASKS) and attempts' create-only claims
// (weft_claims), docs/adr/0032-fewer-writes-per-run.md. Its
// Publish is js.PublishMsg's: concurrent publishes, when 16 or more wait,
// leave as one atomic batch on the stream (which must allow atomic
// publish, else it publishes one by one after the first refusal), and a
// batch refused whole (one message's check failed, a duplicate message id)
// or not acknowledged is published again message by message, each under
// its caller's context, as for the log (one message's refusal never fails
// another's write). A message that names an expected last subject
// sequence shares no batch with another of its subject.
type GroupPublisher struct{ g *grouper }

// NewGroupPublisher returns a GroupPublisher publishing on js.
func NewGroupPublisher(js jetstream.JetStream) *GroupPublisher {
	single := func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) { return js.PublishMsg(ctx, m) }
	return &GroupPublisher{g: &grouper{js: js, nc: js.Conn(), single: single, minGroup: minGroup}}
}

// Publish publishes msg, alone or in an atomic batch with the concurrent
// publishes of p, and returns its acknowledgement. Its outcome is unknown
// when it returns ctx's error or a timeout, as for js.PublishMsg.
func (p *GroupPublisher) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	return p.g.publish(ctx, msg)
}

// CommitStats counts, process-wide, what group commit sent.
type CommitStats struct {
	// Batches is how many atomic batches committed.
	Batches uint64
	// Batched is how many messages those batches held.
	Batched uint64
	// Retried is how many messages were published again on their own
	// after their batch was refused or not acknowledged.
	Retried uint64
}

var commitStats struct{ batches, batched, retried atomic.Uint64 }

// ReadCommitStats returns the process's group-commit counts.
func ReadCommitStats() CommitStats {
	return CommitStats{Batches: commitStats.batches.Load(), Batched: commitStats.batched.Load(), Retried: commitStats.retried.Load()}
}

// grouper queues the publishes of concurrent Appends and sends them in
// atomic batches.
type grouper struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	single func(context.Context, *nats.Msg) (*jetstream.PubAck, error)
	off    atomic.Bool // the stream refused atomic publish
	// minGroup is the fewest messages sent as an atomic batch.
	minGroup int

	// Test hooks (export_test.go): minQueue holds the first flush until
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

// publish is Append's publish step: it queues msg and waits for its
// batch's answer (or ctx).
func (g *grouper) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	if g.off.Load() {
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
		// Unknown outcome: the batch may still land; Append decides
		// as for any publish without an acknowledgement.
		return nil, ctx.Err()
	}
}

// flush sends batches until the queue is empty.
func (g *grouper) flush() {
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
func (g *grouper) take() []*groupWait {
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
func (g *grouper) send(batch []*groupWait) {
	if len(batch) < g.minGroup || g.off.Load() {
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
func (g *grouper) each(batch []*groupWait) {
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

func (e *errBatch) Error() string { return "eventlog: atomic batch: " + e.desc }

// commit sends batch as one atomic batch and returns the stream sequence
// of its last message (the batch is stored contiguously) and the stream.
func (g *grouper) commit(batch []*groupWait) (uint64, string, error) {
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
				g.off.Store(true)
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
