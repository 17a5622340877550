package ownership

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
)

// skewedKV is a real weft_runners bucket as seen from a server whose
// clock is skew from this runner's: its watchers deliver the real
// entries, stamped (Created) skew later.
type skewedKV struct {
	jetstream.KeyValue
	skew time.Duration
}

type skewedEntry struct {
	jetstream.KeyValueEntry
	skew time.Duration
}

func (e skewedEntry) Created() time.Time { return e.KeyValueEntry.Created().Add(e.skew) }

type skewedWatcher struct {
	jetstream.KeyWatcher
	out chan jetstream.KeyValueEntry
}

func (w *skewedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.out }

func (k skewedKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.KeyValueEntry)
	go func() {
		defer close(out)
		for e := range w.Updates() {
			if e != nil {
				e = skewedEntry{e, k.skew}
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return &skewedWatcher{KeyWatcher: w, out: out}, nil
}

// viewWatch runs r's watcher of weft_runners (r.cfg.Live) on the fake clock
// clk until the test ends; seen(key, rev) returns once the watcher has
// taken the key's put at revision rev or later into the view, and ready()
// once a watch delivered the bucket as it is. Neither sleeps: they wait
// for the watcher's hook.
func viewWatch(t *testing.T, r *Peers, clk *clock.Fake) (seen func(key string, rev uint64), ready func()) {
	events := make(chan string, 1024)
	r.cfg.Clock = clk
	r.cfg.Hook = func(event, key string) {
		if event == "runners-view" {
			events <- key
		}
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.WatchRunners(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second) // a bound on the store's delivery, not a measure
		defer deadline.Stop()
		for !ok() {
			select {
			case <-events:
			case <-deadline.C:
				t.Fatalf("the watcher never delivered %s", what)
			}
		}
	}
	v := r.runners
	seen = func(key string, rev uint64) {
		t.Helper()
		wait(fmt.Sprintf("%s at revision %d", key, rev), func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			return v.keys[key].revision >= rev
		})
	}
	ready = func() {
		t.Helper()
		wait("the bucket", func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			return v.ready
		})
	}
	return seen, ready
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": the view
// of the live runners that the partition assignment follows
// ages a peer's liveness key by this runner's own clock since it last saw
// the key change, never by the message's timestamp (the server's clock).
// With the server's clock a lease behind or ahead of this runner's, a
// peer that beats every lease/8 is counted live all along, and a peer
// whose key stops changing is dropped a lease after its last change.
// Aged by its timestamp, a key the server stamped a lease "ago" expired
// on receipt: the live peer was never counted, and its partitions were
// assigned away. This runner's time is a fake clock moved by hand.
func TestSemantics8_TheRunnersViewAgesPeersByThisRunnersClockNotTheServers(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	for _, skew := range []time.Duration{-lease, lease} {
		t.Run(fmt.Sprintf("server clock %v", skew), func(t *testing.T) {
			srv := natstest.Start(t)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// No max age: the server's expiry is not what is tested (the
			// view's own aging is), and the test's real time is not the
			// runner's.
			kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(time.Now()) // near the server's clock: a view aged by the server's stamps would fail
			r := New(testConfig(srv.Conn, skewedKV{kv, skew}, nil, lease, clk), testLoop{})
			seen, ready := viewWatch(t, r, clk)
			b, _ := json.Marshal(beat{Schema: 1, Partitions: 64})
			beatOnce := func(id string) {
				t.Helper()
				rev, err := kv.Put(c, id, b)
				if err != nil {
					t.Fatal(err)
				}
				seen(id, rev)
			}
			peer := func() (live, assignable bool) {
				t.Helper()
				l, a, ok := r.liveRunners()
				if !ok {
					t.Fatal("the view cannot tell")
				}
				return l["peer"], slices.Contains(a, "peer")
			}
			ready()
			beatOnce("me") // this runner's own heartbeat: the watch is never silent
			beatOnce("peer")
			// Two leases of beats every lease/8: counted in every look.
			for range 16 {
				if live, assignable := peer(); !live || !assignable {
					t.Fatalf("a peer beating every lease/8 was dropped from the view (live %v, assignable %v)", live, assignable)
				}
				clk.Advance(lease / 8)
				beatOnce("me")
				beatOnce("peer")
			}
			// The peer stops: counted for a lease after its last change,
			// dropped after.
			for range 7 {
				clk.Advance(lease / 8)
				beatOnce("me")
				if live, _ := peer(); !live {
					t.Fatalf("a peer that beat less than a lease ago (%v) was dropped from the view", clk.Now())
				}
			}
			clk.Advance(lease/8 + time.Millisecond)
			beatOnce("me")
			if live, _ := peer(); live {
				t.Fatal("a peer whose key has not changed for a lease is still counted live")
			}
		})
	}
}

// docs/semantics.md §8: a watch made again (the previous one failed
// or fell silent) delivers every key again; a key it delivers at the
// revision the previous watch saw has not changed since, so it keeps the
// expiry it had — a gone peer's key is not counted for another lease each
// time the watch is made again. This runner's time is a fake clock.
func TestSemantics8_AWatchMadeAgainKeepsTheExpiryOfUnchangedKeys(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(beat{Schema: 1, Partitions: 64})
	if _, err := kv.Put(c, "peer", b); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(testConfig(srv.Conn, kv, nil, lease, clk), testLoop{})
	events := make(chan string, 1024)
	r.cfg.Hook = func(event, key string) {
		if event == "runners-view" {
			events <- key
		}
	}
	// watch makes a watch and returns the peer's entry once the watch
	// delivered the bucket as it is (its hook's ready event).
	watch := func() runnerEntry {
		v := r.runners
		v.mu.Lock()
		v.ready = false
		v.mu.Unlock()
		wctx, stop := context.WithCancel(c)
		done := make(chan struct{})
		go func() { defer close(done); r.watchRunnersOnce(wctx) }()
		defer func() { stop(); <-done }()
		for {
			select {
			case key := <-events:
				if key != "" {
					continue
				}
			case <-c.Done():
				t.Fatal("the watch never delivered the bucket")
			}
			v.mu.Lock()
			k, ok := v.keys["peer"]
			v.mu.Unlock()
			if !ok {
				t.Fatal("the watch did not deliver the peer's key")
			}
			return k
		}
	}
	first := watch()
	clk.Advance(lease / 4) // the second watch receives the key later
	second := watch()
	if !second.until.Equal(first.until) {
		t.Fatalf("the key, unchanged, counts until %v after the watch was made again, %v later than before", second.until, second.until.Sub(first.until))
	}
}
