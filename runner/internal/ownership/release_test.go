package ownership

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a release is graceful: nothing uncertain; a run
// this runner handed off is never recovered by it): a release waits for
// the acquisitions counted before the partition was marked releasing
// before it asks the command loop to hand the partition's runs off, so
// that no run is installed behind its back; meanwhile the partition is
// releasing (OwnerOf: no run of it is acquired). Its key is deleted only
// when the hand-off says every run was handed off and forgotten; a
// postponed release leaves the partition owned and no longer releasing
// (its runs served), a stopped one leaves it releasing for the drain, the
// key still this runner's.
func TestSemantics8_AReleaseDeletesTheKeyOnlyOnceTheRunsAreHandedOff(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan int, 1)
	table := NewTable(TableConfig{ID: "me", Partitions: 4, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler),
		Hook: func(event string, p int) {
			if event == "release-acquiring" {
				waiting <- p
			}
		}}, noOwners{})
	revs := make([]uint64, 3)
	for p := range revs {
		table.claim(c, p, 0, "")
		e, err := kv.Get(c, Key(p))
		if err != nil {
			t.Fatal(err)
		}
		revs[p] = e.Revision()
	}
	if owned := table.Owned(); !slices.Equal(owned, []int{0, 1, 2}) {
		t.Fatalf("claimed %v, want [0 1 2]", owned)
	}
	release := func(p int, outcome HandOff, asked chan<- struct{}) <-chan struct{} {
		table.setReleasing(p, true) // as Pass does
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			table.Release(c, p, revs[p], func(context.Context) HandOff {
				close(asked)
				return outcome
			})
		}()
		return ended
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-c.Done():
			t.Fatalf("%s: %v", what, c.Err())
		}
	}

	// Partition 0, an acquisition in flight: the runs are not asked for
	// until it is done.
	done := table.Acquiring(0)
	asked := make(chan struct{})
	ended := release(0, HandedOff, asked)
	select {
	case p := <-waiting:
		if p != 0 {
			t.Fatalf("waited for an acquisition of partition %d", p)
		}
	case <-asked:
		t.Fatal("the runs were handed off while an acquisition of the partition was in flight")
	case <-c.Done():
		t.Fatal(c.Err())
	}
	select {
	case <-asked:
		t.Fatal("the runs were handed off while an acquisition of the partition was in flight")
	default:
	}
	if owner, releasing := table.OwnerOf(0); owner != "me" || !releasing {
		t.Fatalf("partition 0 during its release: owner %q, releasing %v; want me, releasing", owner, releasing)
	}
	done()
	wait(asked, "the hand-off once the acquisition was done")
	wait(ended, "the release")
	if _, err := kv.Get(c, Key(0)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("partition 0 handed off: its key is not deleted (%v)", err)
	}
	if owner, releasing := table.OwnerOf(0); owner != "" || releasing {
		t.Fatalf("partition 0 released: owner %q, releasing %v; want nobody", owner, releasing)
	}

	// Partitions 1 (postponed) and 2 (stopped): the key stays.
	for p, outcome := range map[int]HandOff{1: Postponed, 2: Stopped} {
		asked := make(chan struct{})
		wait(release(p, outcome, asked), "the release")
		e, err := kv.Get(c, Key(p))
		if err != nil || string(e.Value()) != "me" {
			t.Fatalf("partition %d not handed off: its key is %v (%v), want this runner's", p, e, err)
		}
		if owner, releasing := table.OwnerOf(p); owner != "me" || releasing != (outcome == Stopped) {
			t.Fatalf("partition %d after a release that came to %d: owner %q, releasing %v", p, outcome, owner, releasing)
		}
	}
	if owned := table.Owned(); !slices.Equal(owned, []int{1, 2}) {
		t.Fatalf("owned %v, want [1 2]", owned)
	}

	// The drain's release of the quiet partitions deletes the key of one
	// whose runs were handed off, and leaves the other releasing.
	table.ReleaseQuiet(c, func(_ context.Context, p int) bool { return p == 2 })
	if _, err := kv.Get(c, Key(2)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("partition 2, quiet: its key is not deleted (%v)", err)
	}
	if owner, releasing := table.OwnerOf(1); owner != "me" || !releasing {
		t.Fatalf("partition 1, busy, after the quiet release: owner %q, releasing %v; want me, releasing", owner, releasing)
	}
	if owned := table.Owned(); !slices.Equal(owned, []int{1}) {
		t.Fatalf("owned %v after the quiet release, want [1]", owned)
	}
}

// docs/adr/0019-partitions.md (a claimed partition's driver entries are
// woken): a partition stays due for a scan until a wake of it succeeded;
// one this runner releases is not scanned.
func TestAPartitionStaysDueUntilItsEntriesAreWoken(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	table := NewTable(TableConfig{ID: "me", Partitions: 4, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions"}, noOwners{})
	for p := range 3 {
		table.claim(c, p, 0, "")
	}
	table.setReleasing(2, true)
	wakes := 0
	scan := func(all, ok bool) (due []int) {
		table.Scan(all, func(ps []int) bool { wakes++; due = ps; return ok })
		return due
	}
	if due := scan(false, false); !slices.Equal(due, []int{0, 1}) {
		t.Fatalf("due after the claims: %v, want [0 1]", due)
	}
	if due := scan(false, true); !slices.Equal(due, []int{0, 1}) {
		t.Fatalf("due after a failed wake: %v, want [0 1]", due)
	}
	before := wakes
	if due := scan(false, true); due != nil || wakes != before {
		t.Fatalf("due after a wake: %v (wake called %d times), want none and wake not called", due, wakes-before)
	}
	if due := scan(true, true); !slices.Equal(due, []int{0, 1}) {
		t.Fatalf("all owned, not releasing: %v, want [0 1]", due)
	}
	table.ScanAll()
	if due := scan(false, true); !slices.Equal(due, []int{0, 1}) {
		t.Fatalf("due after ScanAll: %v, want [0 1]", due)
	}
}

// docs/semantics.md §8 (a run can always be answered): the scan of the
// driver entries runs beside the rounds of rebalancing
// (Coordinator.wakeBeside), so a partition it lists may be lost and
// claimed again while it runs. The entries of the new claim are that
// claim's to wake: a scan that listed the partition at its former claim
// leaves it due.
func TestAPartitionClaimedAgainDuringAScanStaysDue(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	table := NewTable(TableConfig{ID: "me", Partitions: 2, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions"}, noOwners{})
	table.claim(c, 0, 0, "")
	table.claim(c, 1, 0, "")
	table.Scan(false, func(ps []int) bool {
		// Partition 1 is lost and claimed again meanwhile (a higher
		// revision of its key).
		s := table.slot(1)
		got, err := kv.Update(c, Key(1), []byte("me"), s.Rev)
		if err != nil {
			t.Fatal(err)
		}
		table.claimed(1, got, "")
		return true
	})
	var due []int
	table.Scan(false, func(ps []int) bool { due = ps; return true })
	if !slices.Equal(due, []int{1}) {
		t.Fatalf("due after a scan during which partition 1 was claimed again: %v, want [1]", due)
	}
}
