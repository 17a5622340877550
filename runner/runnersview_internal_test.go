package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// docs/semantics.md §8 "only a runner that is gone is recovered from": the view
// of the live runners that the partition assignment follows
// ages a peer's liveness key by this runner's own clock since it last saw
// the key change, never by the message's timestamp (the server's clock).
// With the server's clock a lease behind or ahead of this runner's, a
// peer that beats every lease/8 is counted live all along, and a peer
// whose key stops changing is dropped. Aged by its timestamp, a key the
// server stamped a lease "ago" expired on receipt: the live peer was never
// counted, and its partitions were assigned away.
func TestSemantics8_TheRunnersViewAgesPeersByThisRunnersClockNotTheServers(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	for _, skew := range []time.Duration{-lease, lease} {
		t.Run(fmt.Sprintf("server clock %v", skew), func(t *testing.T) {
			srv := natstest.Start(t)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: RunnersBucket, TTL: lease, Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			r := &Runner{id: "me", lease: lease, nparts: DefaultPartitions, live: skewedKV{kv, skew}, runners: newRunnersView(), log: slog.New(slog.DiscardHandler)}
			var wg sync.WaitGroup
			wctx, stopWatch := context.WithCancel(context.Background())
			defer func() { stopWatch(); wg.Wait() }()
			beating := func(id string) (stop func()) {
				b, _ := json.Marshal(beat{Schema: 1, Partitions: DefaultPartitions})
				bctx, bcancel := context.WithCancel(wctx)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						_, _ = kv.Put(bctx, id, b)
						select {
						case <-bctx.Done():
							return
						case <-time.After(lease / 8):
						}
					}
				}()
				return bcancel
			}
			beating("me") // this runner's own heartbeat: the watch is never silent
			stopPeer := beating("peer")
			wg.Add(1)
			go func() { defer wg.Done(); _ = r.watchRunners(wctx) }()
			peer := func() (live, assignable, ok bool) {
				l, a, ok := r.liveRunners(c)
				return l["peer"], a["peer"], ok
			}
			for {
				if live, _, ok := peer(); ok && live {
					break
				}
				if c.Err() != nil {
					t.Fatal("a peer beating every lease/8 was never counted live")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Two leases of beats: counted in every look.
			for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(lease / 40) {
				if live, assignable, ok := peer(); ok && (!live || !assignable) {
					t.Fatalf("a peer beating every lease/8 was dropped from the view (live %v, assignable %v)", live, assignable)
				}
			}
			stopPeer()
			for {
				if live, _, ok := peer(); ok && !live {
					break
				}
				if c.Err() != nil {
					t.Fatal("a peer whose key stopped changing was never dropped from the view")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// docs/semantics.md §8: a watch made again (the previous one failed
// or fell silent) delivers every key again; a key it delivers at the
// revision the previous watch saw has not changed since, so it keeps the
// expiry it had — a gone peer's key is not counted for another lease each
// time the watch is made again.
func TestSemantics8_AWatchMadeAgainKeepsTheExpiryOfUnchangedKeys(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: RunnersBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(beat{Schema: 1, Partitions: DefaultPartitions})
	if _, err := kv.Put(c, "peer", b); err != nil {
		t.Fatal(err)
	}
	r := &Runner{id: "me", lease: lease, nparts: DefaultPartitions, live: kv, runners: newRunnersView(), log: slog.New(slog.DiscardHandler)}
	// watch makes a watch and returns the peer's entry once the watch
	// delivered the bucket as it is (ready; watchRunners resets it when a
	// watch ends, as here).
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
			v.mu.Lock()
			k, ok := v.keys["peer"]
			ready := v.ready
			v.mu.Unlock()
			if ready {
				if !ok {
					t.Fatal("the watch did not deliver the peer's key")
				}
				return k
			}
			if c.Err() != nil {
				t.Fatal("the watch never delivered the bucket")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := watch()
	time.Sleep(lease / 4) // the second watch receives the key later
	second := watch()
	if !second.until.Equal(first.until) {
		t.Fatalf("the key, unchanged, counts until %v after the watch was made again, %v later than before", second.until, second.until.Sub(first.until))
	}
}
