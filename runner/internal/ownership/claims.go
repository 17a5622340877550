package ownership

// Claims, the watcher of weft_partitions and the store's word before a
// takeover (docs/adr/0019-partitions.md, docs/semantics.md §8: only a
// runner that is gone is recovered from). The table follows
// weft_partitions through a watcher, which may be behind: a runner paused
// (SIGSTOP) or cut off from the server wakes up believing it still owns a
// partition another runner claimed meanwhile. A decision that would record
// a takeover is therefore not made on the table alone: the partition's key
// is read from the stream's leader first (partitionKey: a JetStream API
// message get, which only the leader answers — not kv.Get, a direct get
// that any replica of the bucket may answer, behind), and must name this
// runner at a revision no lower than the one it claimed (Verify). After
// the connection reconnected, every owned partition is verified so before
// anything is acquired (VerifyOwned).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/backoff"
)

// Watch keeps the table equal to weft_partitions until ctx ends.
// A partition this runner owned that another runner claimed (this one was
// judged gone, for example while paused) is lost: its runs are forgotten
// at once (their appends would conflict anyway).
// A watch that fails or ends is made again (after a backoff).
func (t *Table) Watch(ctx context.Context) error {
	back := backoff.New(100*time.Millisecond, 2*time.Second)
	ready := false
	for ctx.Err() == nil {
		t.watchOnce(ctx, &ready)
		if back.Wait(ctx) != nil {
			break
		}
	}
	return nil
}

func (t *Table) watchOnce(ctx context.Context, ready *bool) {
	w, err := t.cfg.KV.WatchFiltered(ctx, []string{"p.*"})
	if err != nil {
		t.cfg.Log.Warn("watch partitions", "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	// The values before the watch's first nil are the bucket as it is:
	// taken as they are (after a server restart that lost recent writes
	// a key's revision may be lower than one seen before); later updates
	// only move forward.
	initial := true
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return
		case e, open = <-w.Updates():
		}
		if !open {
			return
		}
		if e == nil {
			initial = false
			if !*ready {
				*ready = true
				close(t.ready)
			}
			continue
		}
		p, err := strconv.Atoi(strings.TrimPrefix(e.Key(), "p."))
		if err != nil || p < 0 || p >= t.cfg.Partitions {
			continue
		}
		owner := ""
		if e.Operation() == jetstream.KeyValuePut {
			owner = string(e.Value())
		}
		t.mu.Lock()
		// A key naming this runner at a revision lower than its claim
		// (the bucket was re-created, or the server lost writes) is no
		// claim of this runner's: a loss, claimed again (claim).
		recreated := initial && owner == t.cfg.ID && t.owner[p] == t.cfg.ID && e.Revision() < t.rev[p]
		lost := t.owner[p] == t.cfg.ID && (owner != t.cfg.ID || recreated) && (initial || e.Revision() > t.rev[p])
		if recreated {
			t.owner[p], t.rev[p] = "", e.Revision()
			t.releasing[p], t.scanDue[p] = false, false
		} else if initial || e.Revision() >= t.rev[p] {
			t.owner[p], t.rev[p] = owner, e.Revision()
			if owner != t.cfg.ID {
				t.releasing[p], t.scanDue[p] = false, false
			}
		}
		t.mu.Unlock()
		if owner == "" || recreated {
			t.Kick()
		}
		if lost && (owner != "" || recreated) {
			t.cfg.Log.Warn("partition lost to another runner", "partition", p, "owner", owner, "recreated", recreated)
			t.loop.ForgetPartition(ctx, p)
		}
	}
}

// claim makes this runner partition p's owner: Create when the key is
// absent or deleted (rev 0), Update at rev when it names previous, a
// runner judged gone. Exactly one claim of several wins.
func (t *Table) claim(ctx context.Context, p int, rev uint64, previous string) {
	var err error
	var got uint64
	if rev == 0 || previous == "" {
		got, err = t.cfg.KV.Create(ctx, Key(p), []byte(t.cfg.ID))
		if errors.Is(err, jetstream.ErrKeyExists) {
			// A key naming this runner that is no claim of its own (a
			// re-created bucket, lost writes: Verify) is claimed
			// anew at its revision.
			if owner, krev, gerr := t.partitionKey(ctx, p); gerr == nil && owner == t.cfg.ID {
				got, err = t.reclaim(ctx, p, krev)
			}
		}
	} else {
		got, err = t.cfg.KV.Update(ctx, Key(p), []byte(t.cfg.ID), rev)
	}
	if err != nil {
		t.cfg.Log.Debug("partition claim lost", "partition", p, "err", err)
		t.catchUp(ctx, p)
		return
	}
	t.claimed(p, got, previous)
}

// reclaim claims partition p, whose key names this runner at revision rev
// without being a claim this runner's table holds, by compare-and-set at
// rev: a write the stream's leader checks, so a key read from a replica
// behind is never taken for ownership.
func (t *Table) reclaim(ctx context.Context, p int, rev uint64) (uint64, error) {
	got, err := t.cfg.KV.Update(ctx, Key(p), []byte(t.cfg.ID), rev)
	if err == nil {
		t.mu.Lock()
		if t.owner[p] == "" {
			t.rev[p] = 0 // the claim is the revision to compare with (claimed)
		}
		t.mu.Unlock()
	}
	return got, err
}

// claimed records this runner's claim of partition p at revision got: owned,
// and due for a scan.
func (t *Table) claimed(p int, got uint64, previous string) {
	t.mu.Lock()
	if got > t.rev[p] {
		t.owner[p], t.rev[p] = t.cfg.ID, got
	}
	t.scanDue[p], t.releasing[p] = true, false
	t.mu.Unlock()
	t.cfg.Log.Info("partition claimed", "partition", p, "previous", previous)
}

// catchUp reads partition p's key after a claim of it was refused and
// moves this runner's table forward to it when the key is at a revision
// the table has not reached: a table set back by a read that was behind
// (lostPartition) would otherwise claim at a revision that is no longer
// the key's on every pass, while its watcher, past that revision already,
// delivers nothing new — and the runs of the partition would wait for a
// command (docs/semantics.md §8: a run can always be answered). The key is
// read from the stream's leader (partitionKey), not from a replica that
// may be behind. A key naming this runner is claimed again by
// compare-and-set at its revision (reclaim), never taken as owned from a
// read; a key naming another runner, or deleted, is applied to the table
// (and, when the table said this runner, the partition is lost:
// lostPartition). A key absent altogether (a re-created bucket) leaves
// the table's revision but names nobody: the next claim is a Create,
// not an Update at a revision the key never had. The table's revision
// never moves back.
func (t *Table) catchUp(ctx context.Context, p int) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owner, rev, err := t.partitionKey(gctx, p)
	if err != nil {
		return // cannot tell: claimed again at the next pass
	}
	t.mu.Lock()
	believed, at := t.owner[p], t.rev[p]
	t.mu.Unlock()
	if rev <= at && !(rev == 0 && believed != "") {
		return
	}
	rev = max(rev, at)
	if owner == t.cfg.ID {
		if got, err := t.reclaim(gctx, p, rev); err == nil {
			t.claimed(p, got, "")
		}
		return
	}
	if believed == t.cfg.ID {
		t.lostPartition(ctx, p, at, owner, rev)
		return
	}
	t.mu.Lock()
	if t.owner[p] == believed && t.rev[p] == at {
		t.owner[p], t.rev[p] = owner, rev
		t.releasing[p], t.scanDue[p] = false, false
	}
	t.mu.Unlock()
}

// Verify reads partition p's key and returns its owner as the
// store says ("" when nobody owns it, or when the key names this runner
// at a revision lower than the one it claimed: the bucket was re-created
// or lost writes, and such a key is no claim of this runner's). A
// partition this runner believed it owned and does not is lost
// (lostPartition).
func (t *Table) Verify(ctx context.Context, p int) (string, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t.mu.Lock()
	believed, claimed := t.owner[p], t.rev[p]
	t.mu.Unlock()
	owner, rev, err := t.partitionKey(gctx, p)
	if err != nil {
		return "", err
	}
	if owner == t.cfg.ID && rev >= claimed {
		return owner, nil
	}
	if owner == t.cfg.ID {
		owner = "" // a re-created key: a loss, claimed again (claim)
	}
	if believed == t.cfg.ID {
		t.lostPartition(ctx, p, claimed, owner, rev)
	}
	return owner, nil
}

// partitionKey reads partition p's key in weft_partitions from the
// stream's leader: a JetStream API message get of the key's last message
// ($JS.API.STREAM.MSG.GET, answered by the leader only), not a direct get
// (kv.Get: the bucket allows direct gets, which any replica answers, and a
// replica may be behind). It returns the key's owner and revision: "" and
// the deletion's revision when the key is deleted, "" and 0 when it is
// absent.
func (t *Table) partitionKey(ctx context.Context, p int) (string, uint64, error) {
	// Bounded whatever the caller's context: a request whose answer a
	// server restart or pause lost is never answered, and a claim's read
	// is made with the partition loop's context (no deadline) — unbounded,
	// it would hold that round of rebalancing for ever, every gone
	// runner's partition after it staying its own (docs/semantics.md §8).
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bucket := "KV_" + t.cfg.Bucket
	m, err := t.cfg.Conn.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+bucket,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, "$KV."+t.cfg.Bucket+"."+Key(p)))
	if err != nil {
		return "", 0, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return "", 0, fmt.Errorf("%s: %v", bucket, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return "", 0, nil
	case resp.Error != nil:
		return "", 0, fmt.Errorf("%s: %d %s", bucket, resp.Error.Code, resp.Error.Description)
	case resp.Message == nil:
		return "", 0, fmt.Errorf("%s: no message in the answer", bucket)
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return "", 0, fmt.Errorf("%s: %v", bucket, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return "", resp.Message.Seq, nil
		}
	}
	return string(resp.Message.Data), resp.Message.Seq, nil
}

// lostPartition records that partition p, which this runner's table says
// it owns at revision claimed, is owned by owner at revision rev (""
// for nobody) and forgets the runs of it this runner holds. The table is
// changed only while it still says what the caller read (a claim made
// meanwhile stands).
func (t *Table) lostPartition(ctx context.Context, p int, claimed uint64, owner string, rev uint64) {
	t.mu.Lock()
	still := t.owner[p] == t.cfg.ID && t.rev[p] == claimed
	if still {
		t.owner[p], t.rev[p] = owner, rev
		t.releasing[p], t.scanDue[p] = false, false
	}
	t.mu.Unlock()
	if !still {
		return
	}
	t.cfg.Log.Warn("partition lost: its key in weft_partitions does not name this runner at its claim", "partition", p, "owner", owner, "revision", rev, "claimed", claimed)
	// The runs are forgotten in the background: the caller may hold one
	// of them (locked), which it drops itself.
	t.loop.ForgetPartitionLater(p)
}

// VerifyOwned checks every partition this runner owns against
// weft_partitions once after each reconnection of its connection (a
// watcher's view may have missed what happened meanwhile), before
// anything is acquired. It returns the error of a key that cannot be read
// (the caller answers runner_busy; checked again at the next
// acquisition).
func (t *Table) VerifyOwned(ctx context.Context) error {
	rc := t.cfg.Conn.Stats().Reconnects
	t.owned.mu.Lock()
	defer t.owned.mu.Unlock()
	if rc == t.owned.reconnects {
		return nil
	}
	for _, p := range t.Owned() {
		if _, err := t.Verify(ctx, p); err != nil {
			return err
		}
	}
	t.cfg.Log.Info("partitions verified after a reconnection", "reconnects", rc, "owned", len(t.Owned()))
	t.owned.reconnects = rc
	return nil
}

// ReleaseKey deletes the key of partition p if this runner owns it,
// marking it not owned first. A key whose delete failed (the context
// ended during it, or the store did not answer) is still this runner's:
// it is owned again in the table, so that a later release (the end of
// the drain: Coordinator.Release) deletes it instead of leaving it naming this
// runner after the window.
func (t *Table) ReleaseKey(ctx context.Context, p int) {
	t.mu.Lock()
	rev, mine := t.rev[p], t.owner[p] == t.cfg.ID
	if mine {
		t.owner[p] = ""
	}
	t.mu.Unlock()
	if !mine {
		return
	}
	if err := t.deleteKey(ctx, p, rev); err != nil {
		t.cfg.Log.Debug("partition release", "partition", p, "err", err)
		t.mu.Lock()
		if t.owner[p] == "" && t.rev[p] == rev {
			t.owner[p] = t.cfg.ID
		}
		t.mu.Unlock()
	}
}

// deleteKey deletes partition p's key at revision rev and, when the
// key moved on meanwhile but still names this runner (a server restart
// lost the revision this runner knew), at its current revision. A key
// that names another runner is left alone (nil: not ours to delete).
func (t *Table) deleteKey(ctx context.Context, p int, rev uint64) error {
	err := t.cfg.KV.Delete(ctx, Key(p), jetstream.LastRevision(rev))
	if err == nil {
		return nil
	}
	e, gerr := t.cfg.KV.Get(ctx, Key(p))
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return nil
	case gerr != nil:
		return err
	case string(e.Value()) != t.cfg.ID:
		return nil
	}
	return t.cfg.KV.Delete(ctx, Key(p), jetstream.LastRevision(e.Revision()))
}
