package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/protocol"
)

// CheckNotPurged refuses run's id when retention purged (or is purging)
// a run of that id: already_started, as for any run that exists, without
// same_input (nobody can compare the input any more). A purged run's id is
// never used again (docs/adr/0030-retention-and-legal-hold.md): a client
// that picks ids like invoice-42 for one run per invoice must not start a
// second one, and a new run must not share the old one's idempotency keys
// (docs/semantics.md §6).
//
// A starter calls it only when run's log has no events: it is a direct
// get of run's key in weft_purges, and a second request when nobody
// answers that one (no bucket, or replicas that do not answer now): the
// JetStream API's message get, whose answer tells the two apart — nil
// when the deployment never ran retention (JetStream says "stream not
// found"), unavailable when it does not answer either, so a start is
// refused rather than reuse a purged id. A direct get may be answered by
// a replica that lags the leader (a marker written a moment before not
// seen yet). The marker is written before the events are purged, so a
// start that found no events finds it.
func CheckNotPurged(ctx context.Context, js jetstream.JetStream, run string) error {
	m, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+PurgesBucket,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, "$KV."+PurgesBucket+"."+run))
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody answered the direct get: no weft_purges, or a bucket
		// whose replicas do not answer it now (a cluster electing, direct
		// gets off). Only JetStream's "stream not found" says there is
		// none; else the tombstone is read through the JetStream API.
		return checkNotPurgedByAPI(ctx, js, run)
	}
	if err != nil {
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: %v", run, PurgesBucket, err)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "404" {
		return nil
	}
	if st := m.Header.Get("Status"); st != "" {
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: status %s %s", run, PurgesBucket, st, m.Header.Get("Description"))
	}
	return tombstoneOf(run, m.Header.Get("KV-Operation"), m.Data)
}

// checkNotPurgedByAPI is CheckNotPurged through the JetStream API's
// message get ($JS.API.STREAM.MSG.GET), whose answer tells a stream that
// does not exist (nil: nothing was ever purged) from one that does; a
// JetStream that does not answer is unavailable, never "not purged".
func checkNotPurgedByAPI(ctx context.Context, js jetstream.JetStream, run string) error {
	m, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+PurgesBucket,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, "$KV."+PurgesBucket+"."+run))
	if err != nil {
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: no answer (%v): whether the id was purged is not known", run, PurgesBucket, err)
	}
	var reply struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Data   []byte `json:"data"`
			Header []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: %v", run, PurgesBucket, err)
	}
	switch {
	case reply.Error != nil && reply.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return nil // no weft_purges: nothing was ever purged
	case reply.Error != nil && reply.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil
	case reply.Error != nil:
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: %v", run, PurgesBucket, reply.Error)
	case reply.Message == nil:
		return weft.Errorf(weft.CodeUnavailable, "run %s: read its tombstone in %s: an answer without a message", run, PurgesBucket)
	}
	op := ""
	if len(reply.Message.Header) > 0 {
		if h, err := nats.DecodeHeadersMsg(reply.Message.Header); err == nil {
			op = h.Get("KV-Operation")
		}
	}
	return tombstoneOf(run, op, reply.Message.Data)
}

// tombstoneOf is the refusal of run's marker b in weft_purges (op its
// KV operation: a deleted or purged key holds no id).
func tombstoneOf(run, op string, b []byte) error {
	if op == "DEL" || op == "PURGE" {
		return nil
	}
	var mk marker
	_ = json.Unmarshal(b, &mk) // any marker holds the id; the state only says when
	when := "is being purged"
	if mk.State == statePurged && mk.Purged != nil {
		when = "was purged at " + mk.Purged.UTC().Format("2006-01-02T15:04:05Z")
	}
	return &weft.Error{Code: weft.CodeAlreadyStarted, Message: fmt.Sprintf("run %s exists: it %s under retention, and a purged run's id is never used again", run, when)}
}

// queuedTasks returns the sequences of the tasks queued in WEFT_TASKS by
// run (none without the stream): one get per queued task, skipping the
// gaps of those taken.
func queuedTasks(ctx context.Context, js jetstream.JetStream) (map[string][]uint64, error) {
	st, err := js.Stream(ctx, protocol.TasksStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("stream %s: %v", protocol.TasksStream, err)
	}
	out := map[string][]uint64{}
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, unavailable("read the tasks of %s: %v", protocol.TasksStream, err)
		}
		var t api.Task
		if json.Unmarshal(m.Data, &t) == nil && t.Run != "" {
			out[t.Run] = append(out[t.Run], m.Sequence)
		}
		seq = m.Sequence
	}
}

// deleteTasks deletes the tasks of WEFT_TASKS at seqs (those gone already
// are skipped).
func deleteTasks(ctx context.Context, js jetstream.JetStream, seqs []uint64) func() error {
	return func() error {
		if len(seqs) == 0 {
			return nil
		}
		st, err := js.Stream(ctx, protocol.TasksStream)
		if err != nil {
			return unavailable("stream %s: %v", protocol.TasksStream, err)
		}
		for _, seq := range seqs {
			if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
				return unavailable("delete task %d of %s: %v", seq, protocol.TasksStream, err)
			}
		}
		return nil
	}
}

// lockKey is the key of weft_purges an Apply holds while it runs (a run
// id has no dot, so it is never a run's key).
const lockKey = "lock.apply"

// lockLease is how long an Apply's lock holds without being renewed: an
// Apply that died leaves it for that long.
const lockLease = 2 * time.Minute

// applyLock is the value of lockKey.
type applyLock struct {
	By    string    `json:"by"`
	Until time.Time `json:"until"`
}

// lock is an Apply's hold of lockKey.
type lock struct {
	kv    jetstream.KeyValue
	by    string
	rev   uint64
	until time.Time
}

// takeLock takes lockKey for one Apply: created when free, taken over
// (compare-and-set) when its holder's lease ran out, refused conflict
// while another Apply holds it.
func takeLock(ctx context.Context, kv jetstream.KeyValue) (*lock, error) {
	host, _ := os.Hostname()
	l := &lock{kv: kv, by: fmt.Sprintf("%s pid %d", host, os.Getpid())}
	e, err := kv.Get(ctx, lockKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return l, l.write(ctx, 0, true)
	case err != nil:
		return nil, unavailable("read the apply lock: %v", err)
	}
	var cur applyLock
	if json.Unmarshal(e.Value(), &cur) == nil && time.Now().Before(cur.Until) {
		return nil, weft.Errorf(weft.CodeConflict, "retention: another retention apply (%s) runs, its lock held until %s: one apply at a time", cur.By, cur.Until.UTC().Format(time.RFC3339))
	}
	return l, l.write(ctx, e.Revision(), false)
}

// write puts l's lease at rev (create: the key must be free).
func (l *lock) write(ctx context.Context, rev uint64, create bool) error {
	until := time.Now().Add(lockLease)
	b, _ := json.Marshal(applyLock{By: l.by, Until: until})
	var err error
	if create {
		rev, err = l.kv.Create(ctx, lockKey, b)
	} else {
		rev, err = l.kv.Update(ctx, lockKey, b, rev)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return weft.Errorf(weft.CodeConflict, "retention: another retention apply took the lock: one apply at a time")
	case err != nil:
		return unavailable("write the apply lock: %v", err)
	}
	l.rev, l.until = rev, until
	return nil
}

// renew extends l's lease once a third of it is used; conflict when
// another Apply took it over (this one stops).
func (l *lock) renew(ctx context.Context) error {
	if l == nil || time.Until(l.until) > 2*lockLease/3 {
		return nil
	}
	return l.write(ctx, l.rev, false)
}

// release frees lockKey (if l still holds it).
func (l *lock) release(ctx context.Context) {
	_ = l.kv.Delete(ctx, lockKey, jetstream.LastRevision(l.rev))
}

// CheckNotBeingPurged refuses a restart from run (docs/semantics.md §14)
// once retention started to remove run (its marker in weft_purges):
// conflict, and nothing starts — a fork started then would be live while
// its parent's log goes. Read as CheckNotPurged reads (unavailable when
// nobody answers). A mark written after this check does not take the
// fork: an apply completes only the runs it chose, and decides the fork,
// live, as any run (Apply).
func CheckNotBeingPurged(ctx context.Context, js jetstream.JetStream, run string) error {
	err := CheckNotPurged(ctx, js, run)
	var we *weft.Error
	if errors.As(err, &we) && we.Code == weft.CodeAlreadyStarted {
		return weft.Errorf(weft.CodeConflict, "run %s: retention started to remove it (docs/adr/0030-retention-and-legal-hold.md): no run is restarted from it", run)
	}
	return err
}
