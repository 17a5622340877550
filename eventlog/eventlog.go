// Package eventlog is Weft's append-only log of run events on the JetStream
// stream WEFT_EVENTS, with per-run optimistic concurrency.
//
// # Layout
//
// Each Append is one decision: the events it carries are stored as ONE
// message on the subject weft.ev.<run>.events (docs/adr/0001 records the
// measurement that chose one message over an atomic batch). The message body
// is {"schema":1,"events":[<envelope>,...]}, each envelope encoded exactly as
// events.Envelope marshals, so a decision is all-or-nothing by construction
// and no reader ever sees half of one.
//
// # Concurrency
//
// Append(ctx, run, head, at, evs...) succeeds only if the run's last message
// is still the one head names: the publish carries
// Nats-Expected-Last-Subject-Sequence = head.Seq with
// Nats-Expected-Last-Subject-Sequence-Subject = weft.ev.<run>.>, so of two
// writers extending a run from the same head exactly one wins; the other
// gets a *ConflictError carrying the run's current Head. Head{} (zero) means
// "the run has no events": appending with it creates the run.
//
// Append retries a publish whose acknowledgement was lost (timeout, no
// response) with the same message id. On R1 the server checks the expected
// sequence before the duplicate window, so such a retry answers "wrong last
// sequence" (10071) when the first attempt had landed; Append then reads the
// run's first message after head.Seq and, if it carries this append's message
// id (the first event's ULID), reports success. So a retried append neither
// duplicates nor reports a false conflict.
//
// # Group commit
//
// With WithGroupCommit, the Appends of one Log that wait at the same time
// (16 or more) are sent as one JetStream atomic batch: each message and
// its checks unchanged, one fsync for all under sync_interval: always; a
// refused batch is sent again message by message (group.go,
// docs/adr/0025-group-commit.md).
//
// # Reading
//
// Load reads a run's whole history and LoadAfter its tail after a Head (for
// example one kept with a snapshot); both use batched direct gets (the
// stream has AllowDirect), about one round trip per 1024 messages, and
// verify versions and the hash chain. Subscribe delivers every run's events
// in log order from a stream sequence through an ordered consumer, for
// projections.
//
// Envelopes: Append stamps each event's ULID (time part = at), run, version
// (head.Version+1, +2, ...), type, schema, recorded time at (UTC) and Prev,
// the Hash of the run's previous event. The log never reads a clock.
package eventlog

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/groupcommit"
	"github.com/weftrun/weft/protocol"
)

// Stream is the name of the stream holding the log.
const Stream = protocol.EventsStream

// SubjectPrefix prefixes every subject of the log: weft.ev.<run>.events.
const SubjectPrefix = "weft.ev."

// Message headers set on every log message (besides the JetStream ones).
const (
	// HeaderRun carries the run id.
	HeaderRun = "Weft-Run"
	// HeaderVersion carries the version of the message's last event.
	HeaderVersion = "Weft-Version"
	// HeaderCount carries how many events the message holds.
	HeaderCount = "Weft-Events"
)

// MessageSchema is the schema version of a log message body.
const MessageSchema = 1

// MaxRunLen is the longest run id.
const MaxRunLen = 128

// ErrEmpty is returned by Append when given no events.
var ErrEmpty = errors.New("eventlog: append of no events")

// ErrCorrupt is wrapped when a stored run breaks the log's invariants
// (versions not consecutive, a broken hash chain, an undecodable message).
var ErrCorrupt = errors.New("eventlog: corrupt log")

// Subject is the subject of run's messages.
func Subject(run string) string { return SubjectPrefix + run + ".events" }

// RunFilter is the subject filter covering all of run's messages,
// weft.ev.<run>.>.
func RunFilter(run string) string { return SubjectPrefix + run + ".>" }

// CheckRun returns a *weft.Error invalid_name unless run is 1 to 128
// characters of [A-Za-z0-9_-].
func CheckRun(run string) error {
	if len(run) == 0 || len(run) > MaxRunLen {
		return &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("run id must be 1 to %d characters of [A-Za-z0-9_-], got %d characters", MaxRunLen, len(run))}
	}
	for i := 0; i < len(run); i++ {
		c := run[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("run id %q: character %q not in [A-Za-z0-9_-]", run, c)}
		}
	}
	return nil
}

// Head is the position of a run's last event. The zero Head means the run
// has no events.
type Head struct {
	// Version is the version of the run's last event.
	Version uint64 `json:"version"`
	// Seq is the WEFT_EVENTS stream sequence of the message holding it.
	Seq uint64 `json:"seq"`
	// Hash is the events.Envelope Hash of the last event.
	Hash string `json:"hash,omitempty"`
}

// IsZero reports whether h is the head of a run without events.
func (h Head) IsZero() bool { return h == Head{} }

// ConflictError is returned by Append when the run's head is no longer the
// expected one: someone else appended since. Nothing was written. It unwraps
// to a *weft.Error with code conflict.
type ConflictError struct {
	// Run is the run id.
	Run string
	// Expected is the head the append was made against.
	Expected Head
	// Current is the run's head as read right after the refusal.
	Current Head
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventlog: conflict on run %s: expected version %d (seq %d), now at version %d (seq %d)",
		e.Run, e.Expected.Version, e.Expected.Seq, e.Current.Version, e.Current.Seq)
}

// Unwrap returns the protocol error: code conflict.
func (e *ConflictError) Unwrap() error {
	return &weft.Error{Code: weft.CodeConflict, Message: e.Error()}
}

// NotSentError is returned by Append when the decision failed before its
// message was sent: an event that does not encode (code internal: a bug),
// or a seal that could not be made (code unavailable: a runner's head key
// that did not sign). Nothing was written, so the outcome is known: unlike
// an append without its acknowledgement, the run need not be read again.
// It unwraps to a *weft.Error with Code and to the cause.
type NotSentError struct {
	// Run is the run id.
	Run string
	// Code is the protocol code of the refusal.
	Code weft.Code
	// Err is the cause.
	Err error
}

// Error describes the failure.
func (e *NotSentError) Error() string {
	return fmt.Sprintf("eventlog: run %s: not sent: %v", e.Run, e.Err)
}

// Unwrap returns the protocol error (Code) and the cause.
func (e *NotSentError) Unwrap() []error {
	return []error{&weft.Error{Code: e.Code, Message: e.Error()}, e.Err}
}

// StreamEvent is one event delivered by Subscribe.
type StreamEvent struct {
	// Seq is the stream sequence of the message holding the event; the
	// events of one decision share it.
	Seq uint64
	// Last is true for the last event of its message: resuming Subscribe
	// from Seq+1 after it skips nothing.
	Last bool
	// Run is the run whose subject holds the message ("" for a message
	// on a subject that names no valid run).
	Run string
	// Envelope is the event; zero when Poison or Void is set.
	Envelope events.Envelope
	// Poison is set, alone, for a message no reader can fold: Run is
	// quarantined from Seq on (it may have been voided later in the log:
	// a reader that meets a VoidRecord of Run reads the run again).
	Poison *PoisonError
	// Void is set, alone, for a repair's void record of Run.
	Void *VoidRecord
}

// Option configures a Log.
type Option func(*Log)

// WithStream uses a stream other than WEFT_EVENTS (with the same subjects).
func WithStream(name string) Option { return func(l *Log) { l.stream = name } }

// WithAttemptTimeout bounds each publish attempt of Append; an attempt that
// gets no acknowledgement in time is retried with the same message id while
// ctx lasts. Default 5s.
func WithAttemptTimeout(d time.Duration) Option { return func(l *Log) { l.attempt = d } }

// Log appends to and reads the event log. It is safe for concurrent use.
type Log struct {
	js      jetstream.JetStream
	stream  string
	attempt time.Duration
	batch   int
	publish func(context.Context, *nats.Msg) (*jetstream.PubAck, error)
	group   *groupcommit.Publisher // nil without WithGroupCommit
	reader  *batchReader

	mu      sync.Mutex
	entropy io.Reader
}

// New returns a Log on js. The stream must exist (see package provision).
func New(js jetstream.JetStream, opts ...Option) *Log {
	l := &Log{js: js, stream: Stream, attempt: 5 * time.Second, batch: loadBatch, entropy: ulid.Monotonic(rand.Reader, 0),
		reader: &batchReader{nc: js.Conn()}}
	l.publish = func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
		return js.PublishMsg(ctx, m)
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

func (l *Log) newID(at time.Time) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, err := ulid.New(ulid.Timestamp(at), l.entropy)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// Append appends evs as one atomic decision to run, only if the run's head
// is still head. It stamps ids, versions, the recorded time at and the hash
// chain, and returns the stored envelopes and the run's new head. It returns
// a *ConflictError when another writer appended since head, a *weft.Error
// invalid_name for a bad run id, payload_too_large when the decision exceeds
// the server's maximum message size, ErrEmpty for no events, and a
// *NotSentError when the decision could not be encoded: in each of these
// nothing was written. When ctx
// ends before an acknowledgement, the error (unavailable, or ctx's error)
// leaves the outcome unknown: the decision may have landed, so re-read the
// run (Head or LoadAfter) before deciding again.
func (l *Log) Append(ctx context.Context, run string, head Head, at time.Time, evs ...events.Event) ([]events.Envelope, Head, error) {
	return l.AppendSealed(ctx, run, head, at, nil, evs...)
}

// Seal returns the event that seals a decision: it is called, while the
// decision is encoded, with the version and envelope hash of the
// decision's last event, and the event it returns is stamped as one more
// event of the same message (the next version, its Prev that hash). A
// runner's signed head (events.HeadSigned) is such an event: it signs the
// decision it is stored with (docs/adr/0044). A nil event leaves the
// decision unsealed; an error fails the append before anything is sent
// (a *NotSentError, code unavailable).
type Seal func(version uint64, hash string) (events.Event, error)

// AppendSealed is Append of the decision evs sealed by seal (nil: not
// sealed, as Append): the message also holds the event seal returns over
// the decision's last envelope, so the stored envelopes and the head
// returned end with it. It is one message, checked and retried as
// Append's, with the same message id.
func (l *Log) AppendSealed(ctx context.Context, run string, head Head, at time.Time, seal Seal, evs ...events.Event) ([]events.Envelope, Head, error) {
	if err := CheckRun(run); err != nil {
		return nil, Head{}, err
	}
	if len(evs) == 0 {
		return nil, Head{}, ErrEmpty
	}
	msg, envs, prev, err := l.encode(run, head, at, evs, seal)
	if err != nil {
		return nil, Head{}, err
	}
	last := envs[len(envs)-1]

	back := backoff.New(10*time.Millisecond, time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, l.attempt)
		ack, err := l.publish(actx, msg)
		cancel()
		if err == nil {
			return envs, Head{Version: last.Version, Seq: ack.Sequence, Hash: prev}, nil
		}
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && isSequenceConflict(apiErr.ErrorCode):
			// Either another writer won, or an earlier attempt of this
			// very append landed and its ack was lost.
			seq, ok, rerr := l.landed(ctx, run, head, envs[0].ID)
			if rerr != nil {
				return nil, Head{}, rerr
			}
			if ok {
				return envs, Head{Version: last.Version, Seq: seq, Hash: prev}, nil
			}
			cur, herr := l.head(ctx, run)
			if herr != nil {
				return nil, Head{}, herr
			}
			return nil, Head{}, &ConflictError{Run: run, Expected: head, Current: cur}
		case errors.Is(err, nats.ErrMaxPayload):
			return nil, Head{}, &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("decision of %d events is %d bytes: %v", len(envs), len(msg.Data), err)}
		case retryable(err) && ctx.Err() == nil:
			// Same message, same id: if the lost attempt landed, the
			// retry is refused (10071) or deduplicated, never stored twice.
			_ = back.Wait(ctx)
			continue
		default:
			return nil, Head{}, fmt.Errorf("eventlog: append run %s: %w", run, unavailable(err))
		}
	}
}

// bodyOpen starts every message body.
var bodyOpen = `{"schema":` + strconv.Itoa(MessageSchema) + `,"events":[`

// encode stamps evs as the decision that extends run from head at time
// at, followed by seal's event over its last envelope when seal is given
// and returns one, and returns the log message carrying them (subject,
// body and headers, the expected-sequence check included) with the stored
// envelopes and the Hash of the last one (hashed from its encoding, not
// encoded again).
func (l *Log) encode(run string, head Head, at time.Time, evs []events.Event, seal Seal) (*nats.Msg, []events.Envelope, string, error) {
	at = at.UTC()
	envs := make([]events.Envelope, 0, len(evs)+1)
	raws := make([][]byte, 0, len(evs)+1)
	prev := head.Hash
	stamp := func(e events.Event) error {
		env, err := events.Encode(e)
		if err != nil {
			return &NotSentError{Run: run, Code: weft.CodeInternal, Err: fmt.Errorf("encode %s: %w", e.EventName(), err)}
		}
		id, err := l.newID(at)
		if err != nil {
			return &NotSentError{Run: run, Code: weft.CodeInternal, Err: fmt.Errorf("event id: %w", err)}
		}
		env.ID, env.Run, env.Version, env.Recorded, env.Prev = id, run, head.Version+uint64(len(envs))+1, at, prev
		raw, err := json.Marshal(env)
		if err != nil {
			return &NotSentError{Run: run, Code: weft.CodeInternal, Err: fmt.Errorf("encode envelope: %w", err)}
		}
		envs, raws = append(envs, env), append(raws, raw)
		prev = events.HashEncoded(raw)
		return nil
	}
	for _, e := range evs {
		if err := stamp(e); err != nil {
			return nil, nil, "", err
		}
	}
	if seal != nil {
		e, err := seal(envs[len(envs)-1].Version, prev)
		if err != nil {
			return nil, nil, "", &NotSentError{Run: run, Code: weft.CodeUnavailable, Err: fmt.Errorf("seal: %w", err)}
		}
		if e != nil {
			if err := stamp(e); err != nil {
				return nil, nil, "", err
			}
		}
	}
	last := envs[len(envs)-1]

	size := len(bodyOpen) + len(raws) + 1
	for _, r := range raws {
		size += len(r)
	}
	body := make([]byte, 0, size)
	body = append(body, bodyOpen...)
	for i, r := range raws {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, r...)
	}
	body = append(body, "]}"...)

	msg := nats.NewMsg(Subject(run))
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, envs[0].ID)
	msg.Header.Set(jetstream.ExpectedStreamHeader, l.stream)
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(head.Seq, 10))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, RunFilter(run))
	msg.Header.Set(HeaderRun, run)
	msg.Header.Set(HeaderVersion, strconv.FormatUint(last.Version, 10))
	msg.Header.Set(HeaderCount, strconv.Itoa(len(envs)))
	return msg, envs, prev, nil
}

// errCodeExpectedLastSeqPerSubjectNotReady is the server's
// JSStreamExpectedLastSeqPerSubjectNotReady (10163, "expected last
// sequence per subject temporarily unavailable"): a clustered stream could
// not check the expected sequence yet. jetstream names no constant for it.
const errCodeExpectedLastSeqPerSubjectNotReady jetstream.ErrorCode = 10163

// isSequenceConflict reports JetStream's wrong-last-sequence codes: stale
// (10071), and the clustered ones (10164, 10163).
func isSequenceConflict(code jetstream.ErrorCode) bool {
	switch code {
	case jetstream.JSErrCodeStreamWrongLastSequence,
		jetstream.JSErrCodeStreamWrongLastSequenceConstant,
		errCodeExpectedLastSeqPerSubjectNotReady:
		return true
	}
	return false
}

func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// unavailable codes err, a store call that did not complete, as
// unavailable (the caller may retry): a read applied nothing, and an
// append without its ack is retried with the same command id, decided on
// what the log then holds. A call ended by its context's cancellation —
// a command whose runner stops under it — is unavailable too, not an
// uncoded error the API would answer internal (a bug); errors.Is still
// finds context.Canceled in it.
func unavailable(err error) error {
	return errors.Join(&weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}, err)
}

// landed reports whether the first message of run after head.Seq carries
// msgID, and its sequence.
func (l *Log) landed(ctx context.Context, run string, head Head, msgID string) (uint64, bool, error) {
	m, err := l.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.stream,
		fmt.Appendf(nil, `{"seq":%d,"next_by_subj":%q}`, head.Seq+1, RunFilter(run)))
	if err != nil {
		return 0, false, fmt.Errorf("eventlog: read back run %s: %w", run, unavailable(err))
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "404" {
		return 0, false, nil
	}
	if st := m.Header.Get("Status"); st != "" {
		return 0, false, fmt.Errorf("eventlog: read back run %s: status %s %s", run, st, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: read back run %s: sequence: %v", ErrCorrupt, run, err)
	}
	return seq, m.Header.Get(jetstream.MsgIDHeader) == msgID, nil
}

// Head returns run's current head (zero when the run has no events).
func (l *Log) Head(ctx context.Context, run string) (Head, error) {
	if err := CheckRun(run); err != nil {
		return Head{}, err
	}
	return l.head(ctx, run)
}

func (l *Log) head(ctx context.Context, run string) (Head, error) {
	_, h, err := l.last(ctx, run)
	return h, err
}

// Last returns the events of run's last message (its last decision) and
// the run's head: one direct get, no fold. A run without events yields
// none and the zero Head.
func (l *Log) Last(ctx context.Context, run string) ([]events.Envelope, Head, error) {
	if err := CheckRun(run); err != nil {
		return nil, Head{}, err
	}
	return l.last(ctx, run)
}

func (l *Log) last(ctx context.Context, run string) ([]events.Envelope, Head, error) {
	m, err := l.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.stream,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, RunFilter(run)))
	if err != nil {
		return nil, Head{}, fmt.Errorf("eventlog: head of run %s: %w", run, unavailable(err))
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "404" {
		return nil, Head{}, nil
	}
	if st := m.Header.Get("Status"); st != "" {
		return nil, Head{}, fmt.Errorf("eventlog: head of run %s: status %s %s", run, st, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, Head{}, fmt.Errorf("%w: head of run %s: sequence: %v", ErrCorrupt, run, err)
	}
	pm, err := parse(run, m.Header, m.Data)
	if err != nil {
		return nil, Head{}, &PoisonError{Run: run, Seq: seq, Reason: err.Error()}
	}
	if pm.void != nil {
		// The run's last message is a repair's void record: its head
		// is the last event's, at the record's sequence.
		_, h, err := l.LoadAfter(ctx, run, Head{})
		return nil, h, err
	}
	envs := pm.envs
	last := envs[len(envs)-1]
	return envs, Head{Version: last.Version, Seq: seq, Hash: last.Hash()}, nil
}

// Load reads run's whole history in order and its head. A run without
// events yields no envelopes and the zero Head.
func (l *Log) Load(ctx context.Context, run string) ([]events.Envelope, Head, error) {
	return l.LoadAfter(ctx, run, Head{})
}

// loadBatch is the number of messages asked for per direct-get batch.
const loadBatch = 1024

// LoadAfter reads run's events after after (typically the head stored with
// a snapshot) and the run's head. With the zero Head it loads everything. It
// checks that versions continue from after.Version and that the hash chain
// continues from after.Hash (when after.Hash is set).
func (l *Log) LoadAfter(ctx context.Context, run string, after Head) ([]events.Envelope, Head, error) {
	if err := CheckRun(run); err != nil {
		return nil, Head{}, err
	}
	// Read the whole tail first: a void record (a repair, docs/adr/0011)
	// comes after the message it voids.
	var msgs []*nats.Msg
	next := after.Seq + 1
	// Most reads are short tails: ask for a few messages first, then for
	// full batches while the server says more are pending.
	size := min(l.batch, firstBatch)
	for {
		got, err := l.reader.get(ctx, l.stream, next, RunFilter(run), size, l.attempt)
		if err != nil {
			return nil, Head{}, fmt.Errorf("eventlog: load run %s: %w", run, unavailable(err))
		}
		more := false
		for _, m := range got {
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return nil, Head{}, fmt.Errorf("%w: run %s: sequence: %v", ErrCorrupt, run, err)
			}
			next = seq + 1
			more = m.Header.Get("Nats-Num-Pending") != "0"
		}
		msgs = append(msgs, got...)
		if !more || len(got) == 0 {
			break
		}
		size = l.batch
	}
	return fold(run, after, msgs)
}

// fold checks and collects the events of run's messages msgs, read after
// after, skipping the messages void records supersede and the records.
// On a message no reader can fold it returns the events before it, the
// head after them and a *PoisonError.
func fold(run string, after Head, msgs []*nats.Msg) ([]events.Envelope, Head, error) {
	seqOf := func(m *nats.Msg) uint64 {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		return seq
	}
	var voided map[uint64]bool
	for _, m := range msgs {
		if m.Header.Get(HeaderVoid) == "" {
			continue
		}
		if pm, err := parse(run, m.Header, m.Data); err == nil && pm.void != nil && pm.void.Seq < seqOf(m) {
			if voided == nil {
				voided = map[uint64]bool{}
			}
			voided[pm.void.Seq] = true
		}
	}
	head := after
	var out []events.Envelope
	for _, m := range msgs {
		seq := seqOf(m)
		if voided[seq] {
			continue
		}
		pm, err := parse(run, m.Header, m.Data)
		if err != nil {
			return out, head, &PoisonError{Run: run, Seq: seq, Reason: err.Error()}
		}
		if pm.void != nil {
			head.Seq = seq // the next append expects the record as the run's last message
			continue
		}
		// The events within the message are chained (parse checked
		// them): the first must follow the head.
		if env := pm.envs[0]; env.Version != head.Version+1 || (head.Hash != "" && env.Prev != head.Hash) {
			return out, head, &PoisonError{Run: run, Seq: seq, Reason: fmt.Sprintf("event %s version %d does not follow version %d", short(env.ID), env.Version, head.Version)}
		}
		out = append(out, pm.envs...)
		// Only the message's last event's hash is needed: parse checked
		// the chain within the message.
		last := pm.envs[len(pm.envs)-1]
		head = Head{Version: last.Version, Seq: seq, Hash: last.Hash()}
	}
	return out, head, nil
}

// firstBatch is how many messages the first direct get of a load asks for.
const firstBatch = 32

// Subscribe calls fn for every event of every run in log order, starting
// with the message at stream sequence fromSeq (0 or 1: from the beginning),
// through an ordered consumer. A message no reader can fold is delivered
// as one StreamEvent with Poison set, a repair's void record as one with
// Void set: neither stops the subscription, so one bad message never stops
// the other runs (docs/adr/0011). It blocks until ctx ends (returning nil) or
// fn returns an error (returning it). fn is called from one goroutine.
func (l *Log) Subscribe(ctx context.Context, fromSeq uint64, fn func(StreamEvent) error) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{SubjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if fromSeq > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = fromSeq
	}
	cons, err := l.js.OrderedConsumer(ctx, l.stream, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("eventlog: subscribe: %w", unavailable(err))
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("eventlog: subscribe: %w", unavailable(err))
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("eventlog: subscribe: %w", unavailable(err))
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("%w: subscribe: metadata: %v", ErrCorrupt, err)
		}
		seq := meta.Sequence.Stream
		run := runOf(m.Subject())
		pm, err := parse(run, m.Headers(), m.Data())
		switch {
		case err != nil:
			err = fn(StreamEvent{Seq: seq, Last: true, Run: run, Poison: &PoisonError{Run: run, Seq: seq, Reason: err.Error()}})
		case pm.void != nil:
			err = fn(StreamEvent{Seq: seq, Last: true, Run: run, Void: &VoidRecord{At: seq, Void: *pm.void}})
		default:
			for i, env := range pm.envs {
				if err = fn(StreamEvent{Seq: seq, Last: i == len(pm.envs)-1, Run: run, Envelope: env}); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
}
