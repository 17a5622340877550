package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/protocol"
)

// BucketIndex holds the order indexes (docs/adr/0020,
// docs/protocol/50-queries.md "Order indexes"): it holds, for the run list and for each
// inbox, one entry per run or item under a key that names its time window
// (the millisecond of its order time) and its filter tokens, and a
// directory of the windows that hold entries: a trie over the window's 14
// decimal digits, two digits a level, one node per non-empty (window
// prefix, filter tokens). A query walks the directory from the newest (or
// oldest) window down, reading only the nodes and windows on its way, so a
// page costs about the same with a thousand runs as with a million.
//
//	<index>.e.<window>.<tokens>.<id>      the entry (value: the summary or item)
//	<index>.d.p<prefix>.<digits>.<tokens> the window prefix+digits holds entries with those tokens (value {})
//	runs.d.p<prefix>.<digits>.all         the window prefix+digits holds runs of any status and agent
//
// <tokens> are status and agent for the run list, the agent for an inbox,
// each escaped like an action key (Token); <id> is the run id, or the
// item's key <run>.<action key>.
const BucketIndex = protocol.IndexBucket

// The indexes of BucketIndex: the first token of each key.
const (
	// IndexRuns orders the run summaries by last change (entry tokens:
	// status, agent).
	IndexRuns = "runs"
	// IndexApprovals orders the pending approval requests by request time
	// (entry token: agent).
	IndexApprovals = "approvals"
	// IndexUncertain orders the uncertain effects by when they became
	// uncertain (entry token: agent).
	IndexUncertain = "uncertain"
	// IndexQuestions orders the open questions by when they were asked
	// (entry token: agent).
	IndexQuestions = "questions"
	// IndexForks lists the runs restarted from each run (docs/semantics.md
	// §14), by the restarted run's start (entry token: the parent run).
	IndexForks = "forks"
)

// windowDigits is the width of a window: milliseconds since 1970, zero
// padded (up to the year 5138; later times share the last window).
const windowDigits = 14

// levelDigits is how many digits of the window one directory level adds;
// a node has at most 10^levelDigits children per token combination.
const levelDigits = 2

// nodeValue is the value of a directory node.
var nodeValue = []byte("{}")

// Token escapes one key token of an index: every byte outside
// [A-Za-z0-9_-] is written "=XX" (as in projections.ItemKey), and the
// empty string is "=".
func Token(s string) string {
	if s == "" {
		return "="
	}
	k := projections.ItemKey("", s)
	return k[1:]
}

// window returns the window of t: its millisecond since 1970, clamped to
// the representable range, as windowDigits digits.
func window(t time.Time) string {
	ms := max(t.UnixMilli(), 0)
	if ms >= 1e14 {
		ms = 1e14 - 1
	}
	s := strconv.FormatInt(ms, 10)
	return strings.Repeat("0", windowDigits-len(s)) + s
}

// entry is one index entry: its key, value, window and filter tokens.
type entry struct {
	key    string
	value  []byte
	index  string
	window string
	tokens string // the filter tokens, joined by "."
}

// anyTokens is the node token of the runs index's second directory, which
// says where runs of any status and agent are: an unfiltered list reads
// one node per child instead of one per status and agent combination.
const anyTokens = "all"

// chain is one directory an entry is listed in: the tokens of its nodes
// and the entry filter that says whether a window still holds one.
type chain struct{ node, match string }

// chains returns the directories of e: its own tokens, and for a run
// the directory of any status and agent.
func (e entry) chains() []chain {
	out := []chain{{e.tokens, e.tokens}}
	if e.index == IndexRuns {
		out = append(out, chain{anyTokens, "*.*"})
	}
	return out
}

func newEntry(index string, at time.Time, tokens []string, id string, v any) entry {
	b, _ := json.Marshal(v)
	w := window(at)
	tk := strings.Join(tokens, ".")
	return entry{key: index + ".e." + w + "." + tk + "." + id, value: b, index: index, window: w, tokens: tk}
}

// entries returns the index entries a derived change accounts for: the
// run's summary and its inbox items.
func entries(c projections.Change) []entry {
	var out []entry
	if c.Summary.Run != "" {
		out = append(out, newEntry(IndexRuns, c.Summary.Updated, []string{Token(c.Summary.Status), Token(c.Summary.Agent.Name)}, c.Summary.Run, c.Summary))
	}
	for _, it := range c.Approvals {
		out = append(out, newEntry(IndexApprovals, it.Requested, []string{Token(it.Agent.Name)}, projections.ItemKey(it.Run, it.Action), it))
	}
	for _, it := range c.Uncertain {
		out = append(out, newEntry(IndexUncertain, it.Since, []string{Token(it.Agent.Name)}, projections.ItemKey(it.Run, it.Action), it))
	}
	for _, it := range c.Questions {
		out = append(out, newEntry(IndexQuestions, it.Since, []string{Token(it.Agent.Name)}, projections.ItemKey(it.Run, it.Action), it))
	}
	if f := c.View.ForkedFrom; f != nil && c.View.Run != "" {
		out = append(out, newEntry(IndexForks, c.View.Started, []string{Token(f.Run)}, c.View.Run, Fork{Run: c.View.Run, Turn: f.Turn, Version: f.Version, Started: c.View.Started}))
	}
	return out
}

// Fork is a run restarted from a finished run (docs/semantics.md §14), as
// the finished run's view query lists it: the new run, the turn it asked
// again, the parent's version it was judged on and when it started.
type Fork struct {
	Run     string    `json:"run"`
	Turn    int64     `json:"turn"`
	Version uint64    `json:"version"`
	Started time.Time `json:"started"`
}

// derivedOf is what a stored view accounts for in the index (nothing for
// no view).
func derivedOf(v projections.RunView) projections.Change {
	if v.Run == "" {
		return projections.Change{}
	}
	return projections.Derive(v)
}

// nodes returns the directory node keys of a window and tokens, from the
// root down.
func nodes(index, w, tokens string) []string {
	var out []string
	for n := 0; n < windowDigits; n += levelDigits {
		out = append(out, nodeKey(index, w[:n], w[n:n+levelDigits], tokens))
	}
	return out
}

func nodeKey(index, prefix, digits, tokens string) string {
	return index + ".d.p" + prefix + "." + digits + "." + tokens
}

// indexWriter maintains BucketIndex for one projector. Its writes for one
// run never interleave (a projector folds the log in order); known caches
// the directory nodes this writer put and has not pruned, so an entry into
// a window already known costs one put.
type indexWriter struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
	known  map[string]bool
	// writes counts the KV operations (puts, purges, existence checks).
	writes uint64
	// answered counts the writes and existence checks of this writer and
	// of the pipelines it hands out (newPipeline) that the server
	// answered: the watchdog (Projector.stalled) counts them as progress.
	answered atomic.Uint64
	// between, when set (tests), is called in the middle of every move:
	// between its removals and its puts.
	between func()
}

// maxKnown bounds the node cache; it is emptied when full.
const maxKnown = 1 << 16

func newIndexWriter(ctx context.Context, js jetstream.JetStream) (*indexWriter, error) {
	kv, err := js.KeyValue(ctx, BucketIndex)
	if err != nil {
		return nil, fmt.Errorf("projector: bucket %s: %w", BucketIndex, err)
	}
	st, err := js.Stream(ctx, kvStream(BucketIndex))
	if err != nil {
		return nil, fmt.Errorf("projector: bucket %s: %w", BucketIndex, err)
	}
	return &indexWriter{js: js, kv: kv, stream: st, known: map[string]bool{}}, nil
}

func kvStream(bucket string) string { return "KV_" + bucket }

// putMode says which of the entries and nodes an index move puts.
type putMode int

const (
	// putChanged puts the entries that are new or changed, and their
	// nodes this writer has not put yet (a fold step).
	putChanged putMode = iota
	// putEntries puts every entry, and its nodes this writer has not put
	// yet: a rebuild (its writer starts with no node known), which must
	// restore an index lost or left incomplete while the views were kept.
	putEntries
	// putAll puts every entry and every node (a repair after a stop
	// between writes).
	putAll
)

// apply moves the index from the entries of before to those of after:
// it first removes the entries after no longer has (pruning the directory
// nodes left without entries), then puts the entries mode asks for (and
// their directory nodes, root first). Removals come first so that a
// run's old and new entries are never in the index together: a reader
// sees the old one, or neither, or the new one, never both, and a page
// cannot list a run twice (the paging contract, docs/protocol/50-queries.md).
// A stop in between leaves the run without an entry until the view's last
// event is delivered again (repair puts every entry back).
func (w *indexWriter) apply(ctx context.Context, before, after []entry, mode putMode) error {
	if err := w.removeGone(ctx, before, after); err != nil {
		return err
	}
	w.pause()
	// The puts are published at once and their acknowledgements awaited
	// together (they arrive in order: nodes before their entry).
	pl := w.newPipeline()
	defer pl.settle()
	err := w.put(ctx, pl, before, after, mode)
	if err == nil {
		err = pl.wait(ctx, nil)
	}
	if err != nil {
		clear(w.known) // a node may be missing
		return err
	}
	return nil
}

// pause calls between (tests) between the two halves of a move.
func (w *indexWriter) pause() {
	if w.between != nil {
		w.between()
	}
}

// removeGone is the first half of apply: it removes the entries of
// before that after no longer has.
func (w *indexWriter) removeGone(ctx context.Context, before, after []entry) error {
	return w.removeAll(ctx, gone(before, after))
}

// gone returns the entries of before that after no longer has.
func gone(before, after []entry) []entry {
	has := make(map[string]bool, len(after))
	for _, e := range after {
		has[e.key] = true
	}
	var out []entry
	for _, e := range before {
		if !has[e.key] {
			out = append(out, e)
		}
	}
	return out
}

// put is the second half of apply: it publishes on pl the entries of
// after that mode asks for, each after the directory nodes it needs,
// without waiting for their acknowledgements. Whoever waits for pl must
// empty the node cache when a put failed (a node may be missing).
func (w *indexWriter) put(ctx context.Context, pl *pipeline, before, after []entry, mode putMode) error {
	had := make(map[string][]byte, len(before))
	for _, e := range before {
		had[e.key] = e.value
	}
	put := func(key string, value []byte) error {
		w.writes++
		return pl.publish(ctx, &nats.Msg{Subject: "$KV." + BucketIndex + "." + key, Data: value})
	}
	for _, e := range after {
		old, ok := had[e.key]
		if ok && bytes.Equal(old, e.value) && mode == putChanged {
			continue
		}
		for _, c := range e.chains() {
			for _, k := range nodes(e.index, e.window, c.node) {
				if w.known[k] && mode != putAll {
					continue
				}
				if err := put(k, nodeValue); err != nil {
					return err
				}
				if len(w.known) >= maxKnown {
					clear(w.known)
				}
				w.known[k] = true
			}
		}
		if err := put(e.key, e.value); err != nil {
			return err
		}
	}
	return nil
}

// purge removes key from the bucket without a delete marker (a marker
// would count as an entry for the existence checks of pruning).
func (w *indexWriter) purge(ctx context.Context, key string) error {
	w.writes++
	if err := w.purgeKey(ctx, key); err != nil {
		return err
	}
	delete(w.known, key)
	return nil
}

func (w *indexWriter) purgeKey(ctx context.Context, key string) error {
	err := sent(ctx, func(ctx context.Context) error {
		return w.stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+BucketIndex+"."+key))
	})
	w.answered.Add(1)
	if err != nil {
		return fmt.Errorf("projector: purge %s %s: %w", BucketIndex, key, err)
	}
	return nil
}

// exists reports whether some key matches the subject filter.
func (w *indexWriter) exists(ctx context.Context, filter string) (bool, error) {
	_, err := w.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("$KV."+BucketIndex+"."+filter))
	w.answered.Add(1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("projector: read %s %s: %w", BucketIndex, filter, err)
	}
	return true, nil
}

// removeConcurrency bounds the purges and existence checks removeAll has
// in flight at once.
const removeConcurrency = 16

// removeAll removes the entries gone (of one run or of a batch's runs):
// it purges them, then prunes their directories from the windows up,
// purging every node that no longer leads to an entry. It goes level by
// level — every node of a level that leads to nothing is purged before
// the level above is checked — so it leaves what removing the entries one
// by one leaves, while the purges and checks of one level are sent
// together (removeConcurrency at a time): each purge is an fsync'd write
// under sync_interval always.
func (w *indexWriter) removeAll(ctx context.Context, gone []entry) error {
	if len(gone) == 0 {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for _, e := range gone {
		if !seen[e.key] {
			seen[e.key] = true
			keys = append(keys, e.key)
		}
	}
	if err := w.purgeAll(ctx, keys); err != nil {
		return err
	}
	// dir is a directory node of a chain: prefix is its window prefix
	// (the whole window at the bottom).
	type dir struct{ index, node, match, prefix string }
	var dirs []dir
	var filters []string
	for _, e := range gone {
		for _, c := range e.chains() {
			f := e.index + ".e." + e.window + "." + c.match + ".>"
			if !seen[f] {
				seen[f] = true
				dirs = append(dirs, dir{e.index, c.node, c.match, e.window})
				filters = append(filters, f)
			}
		}
	}
	for n := windowDigits - levelDigits; len(dirs) > 0; n -= levelDigits {
		held, err := w.existAll(ctx, filters)
		if err != nil {
			return err
		}
		var empty []dir
		keys = keys[:0]
		for i, d := range dirs {
			if !held[i] {
				empty = append(empty, d)
				keys = append(keys, nodeKey(d.index, d.prefix[:n], d.prefix[n:], d.node))
			}
		}
		if err := w.purgeAll(ctx, keys); err != nil || n == 0 {
			return err
		}
		// The level above: does each parent still lead to a node?
		dirs, filters = dirs[:0], filters[:0]
		for _, d := range empty {
			f := d.index + ".d.p" + d.prefix[:n] + ".*." + d.node
			if !seen[f] {
				seen[f] = true
				dirs = append(dirs, dir{d.index, d.node, d.match, d.prefix[:n]})
				filters = append(filters, f)
			}
		}
	}
	return nil
}

// purgeAll purges keys, removeConcurrency at a time. Once ctx ends or a
// purge failed it sends no more purges but waits for the answers of those
// it sent (purgeKey: sent), so that none is still in flight when the
// projector gives its lease up (as pipeline.settle).
func (w *indexWriter) purgeAll(ctx context.Context, keys []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(removeConcurrency)
	for _, k := range keys {
		g.Go(func() error { return w.purgeKey(gctx, k) })
	}
	err := g.Wait()
	for _, k := range keys {
		w.writes++
		if err == nil {
			delete(w.known, k)
		}
	}
	if err != nil {
		clear(w.known) // a purge may have landed
	}
	return err
}

// existAll reports for each filter whether some key matches it,
// removeConcurrency checks at a time.
func (w *indexWriter) existAll(ctx context.Context, filters []string) ([]bool, error) {
	held := make([]bool, len(filters))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(removeConcurrency)
	for i, f := range filters {
		g.Go(func() (err error) { held[i], err = w.exists(gctx, f); return err })
	}
	w.writes += uint64(len(filters))
	return held, g.Wait()
}

// kvMsg is one message of a direct get: its key (the subject after the
// bucket's prefix), stream sequence and value.
type kvMsg struct {
	key   string
	seq   uint64
	value []byte
}

// errTooMany is a multi-subject direct get refused for matching more than
// the server answers at once (1,024 subjects).
var errTooMany = errors.New("too many results")

// indexReader reads a KV bucket's latest values with direct gets: no
// consumer, nothing held between requests. Each request waits for its
// answer at most the request timeout of the JetStream context (js): a
// request the server took and never answered (it died before it did, or
// the answer was lost with the connection) fails as unanswered instead of
// holding its reader for good.
type indexReader struct {
	nc *nats.Conn
	js jetstream.JetStream
	// onRead is called with the number of messages each request read.
	onRead func(n int)
	// beforeRequest, set by tests only (export_test.go), is called
	// before each direct get request is sent.
	beforeRequest func(bucket string)
}

// last returns the latest value of every key of bucket matching one of
// filters (KV key filters). Deleted keys are left out. One multi-subject
// direct get answers up to 1,024 keys; a filter matching more is read
// through a KV watch of its own (an ordered consumer delivering the last
// value of each matching key: a cost in the number of keys it matches).
func (r *indexReader) last(ctx context.Context, bucket string, filters []string) ([]kvMsg, error) {
	msgs, err := r.direct(ctx, bucket, subjects(bucket, filters))
	if !errors.Is(err, errTooMany) {
		return msgs, err
	}
	msgs = nil
	for _, f := range filters {
		got, err := r.direct(ctx, bucket, subjects(bucket, []string{f}))
		if errors.Is(err, errTooMany) {
			got, err = r.watch(ctx, bucket, f)
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, got...)
	}
	return msgs, nil
}

func subjects(bucket string, filters []string) []string {
	out := make([]string, len(filters))
	for i, f := range filters {
		out[i] = "$KV." + bucket + "." + f
	}
	return out
}

// watch reads every key of bucket matching filter with a KV watch.
func (r *indexReader) watch(ctx context.Context, bucket, filter string) ([]kvMsg, error) {
	kv, err := r.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", bucket, err)
	}
	var out []kvMsg
	defer func() {
		if r.onRead != nil {
			r.onRead(len(out))
		}
	}()
	err = initial(ctx, kv, filter, func(e jetstream.KeyValueEntry) error {
		out = append(out, kvMsg{key: e.Key(), seq: e.Revision(), value: e.Value()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", bucket, filter, err)
	}
	return out, nil
}

// watchIdle bounds how long a read through a KV watch waits for its next
// value, as ackWait bounds a write: a watch whose consumer a server
// restart took away, and that its client did not create again, delivers
// nothing more, and the read fails as unanswered (the projector resumes
// from its checkpoint) instead of waiting for good.
const watchIdle = ackWait

// initial reads the latest value of every key of kv matching filter
// (deleted keys left out) through a KV watch, in stream order, passing
// each to each. It fails when the watch ends before its last initial
// value or delivers nothing for watchIdle.
func initial(ctx context.Context, kv jetstream.KeyValue, filter string, each func(jetstream.KeyValueEntry) error, opts ...jetstream.WatchOpt) error {
	w, err := kv.Watch(ctx, filter, append(opts, jetstream.IgnoreDeletes())...)
	if err != nil {
		return err
	}
	defer w.Stop()
	idle := time.NewTimer(watchIdle)
	defer idle.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil {
				return nil
			}
			if err := each(e); err != nil {
				return err
			}
			idle.Reset(watchIdle)
		case <-idle.C:
			return fmt.Errorf("watch: no value within %s: %w", watchIdle, context.DeadlineExceeded)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// listKeys lists the keys of kv (deleted keys left out), as a bounded
// initial read (kv.ListKeys waits for the end of its listing with no
// deadline).
func listKeys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	var out []string
	err := initial(ctx, kv, jetstream.AllKeys, func(e jetstream.KeyValueEntry) error {
		out = append(out, e.Key())
		return nil
	}, jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("projector: list %s: %w", kv.Bucket(), err)
	}
	return out, nil
}

// direct sends one batched direct get request to bucket's stream and
// collects its messages up to the end-of-batch marker.
func (r *indexReader) direct(ctx context.Context, bucket string, multiLast []string) ([]kvMsg, error) {
	body, err := json.Marshal(map[string]any{"multi_last": multiLast})
	if err != nil {
		return nil, err
	}
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", bucket, err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(ctx, r.js.Options().DefaultTimeout)
	defer cancel()
	if r.beforeRequest != nil {
		r.beforeRequest(bucket)
	}
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+kvStream(bucket), inbox, body); err != nil {
		return nil, fmt.Errorf("read %s: %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	var out []kvMsg
	defer func() {
		if r.onRead != nil {
			r.onRead(len(out))
		}
	}()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", bucket, err)
		}
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			switch status {
			case "204": // end of batch
				return out, nil
			case "404":
				return out, nil
			case "413":
				return nil, errTooMany
			default:
				return nil, fmt.Errorf("read %s: direct get answered %s %s", bucket, status, m.Header.Get("Description"))
			}
		}
		if op := m.Header.Get(kvOperation); op == kvDelete || op == "PURGE" {
			continue
		}
		seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		out = append(out, kvMsg{key: strings.TrimPrefix(m.Header.Get("Nats-Subject"), prefix), seq: seq, value: m.Data})
	}
}

// walk visits the entries of one index window by window, in time order
// (newest first when desc), reading the directory from the root. Filter
// tokens are escaped tokens or "*". from bounds the first window visited
// (desc: windows at or before it; asc: at or after), to the last (desc
// only: windows at or after it); "" does not bound. visit receives the
// entries of a few consecutive windows at a time, in stream order, and
// returns true to stop.
type walk struct {
	r      *indexReader
	index  string
	tokens string
	// nodes is the directory's node token filter: tokens, or anyTokens
	// for a run list filtered on neither status nor agent.
	nodes string
	desc  bool
	from  string
	to    string
	visit func([]kvMsg) (bool, error)
}

// batchWindows is how many windows one entry read asks for.
const batchWindows = 8

func (w *walk) run(ctx context.Context) error {
	_, err := w.node(ctx, "")
	return err
}

func (w *walk) node(ctx context.Context, prefix string) (bool, error) {
	nodes := w.nodes
	if nodes == "" {
		nodes = w.tokens
	}
	msgs, err := w.r.last(ctx, BucketIndex, []string{w.index + ".d.p" + prefix + ".*." + nodes})
	if err != nil {
		return false, err
	}
	seen := map[string]bool{}
	var kids []string
	for _, m := range msgs {
		// <index>.d.p<prefix>.<digits>.<tokens>
		rest := strings.TrimPrefix(m.key, w.index+".d.p"+prefix+".")
		d, _, _ := strings.Cut(rest, ".")
		if len(d) != levelDigits || seen[d] {
			continue
		}
		p := prefix + d
		n := len(p)
		if w.desc {
			if w.from != "" && p > w.from[:n] || w.to != "" && p < w.to[:n] {
				continue
			}
		} else if w.from != "" && p < w.from[:n] {
			continue
		}
		seen[d] = true
		kids = append(kids, p)
	}
	slices.Sort(kids)
	if w.desc {
		slices.Reverse(kids)
	}
	if len(prefix)+levelDigits < windowDigits {
		for _, k := range kids {
			if stop, err := w.node(ctx, k); stop || err != nil {
				return stop, err
			}
		}
		return false, nil
	}
	// The first read asks for one window, each next for twice as many
	// (up to batchWindows): a dense window fills a page alone.
	for size := 1; len(kids) > 0; size = min(2*size, batchWindows) {
		n := min(len(kids), size)
		filters := make([]string, n)
		for i, k := range kids[:n] {
			filters[i] = w.index + ".e." + k + "." + w.tokens + ".>"
		}
		kids = kids[n:]
		msgs, err := w.r.last(ctx, BucketIndex, filters)
		if err != nil {
			return false, err
		}
		if stop, err := w.visit(msgs); stop || err != nil {
			return stop, err
		}
	}
	return false, nil
}
