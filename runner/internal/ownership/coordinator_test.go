package ownership

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/partition"
)

// fakeLoop is the command loop of a test's Coordinator: it holds no run;
// it records the wakes it is asked for and answers them with wakeOK (the
// nth call, from 0), and a round's hand-off with handOff.
type fakeLoop struct {
	mu          sync.Mutex
	quarantined int     // WatchQuarantined calls
	wakes       [][]int // WakePartitions calls' due lists
	wakeOK      func(n int) bool
	handOff     func(ctx context.Context, p int) HandOff
}

func (*fakeLoop) Draining() bool                             { return false }
func (*fakeLoop) ForgetPartition(context.Context, int, bool) { /* holds no run */ }
func (*fakeLoop) Unbounded(int) bool                         { return false }
func (l *fakeLoop) WatchQuarantined(context.Context)         { l.mu.Lock(); l.quarantined++; l.mu.Unlock() }
func (l *fakeLoop) HandOff(ctx context.Context, p int, quiet bool) HandOff {
	if quiet || l.handOff == nil {
		return HandedOff
	}
	return l.handOff(ctx, p)
}

func (l *fakeLoop) WakePartitions(_ context.Context, due []int) bool {
	l.mu.Lock()
	n := len(l.wakes)
	l.wakes = append(l.wakes, slices.Clone(due))
	l.mu.Unlock()
	return l.wakeOK == nil || l.wakeOK(n)
}

func (l *fakeLoop) calls() (quarantined int, wakes [][]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.quarantined, slices.Clone(l.wakes)
}

// hooks counts the Coordinator's hook events, and each with its key
// ("runners-view peer"); wait(event, n) returns once event happened n
// times, without sleeping.
type hooks struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{}
}

func (h *hooks) hook(event string, _ int, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[event]++
	if key != "" {
		h.n[event+" "+key]++
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *hooks) count(event string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[event]
}

func (h *hooks) wait(t *testing.T, event string, n int) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second) // a bound on the store's answers, not a measure
	defer deadline.Stop()
	for {
		h.mu.Lock()
		got, changed := h.n[event], h.changed
		h.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%q happened %d times, want %d", event, got, n)
		}
	}
}

const coordLease = 2 * time.Second

// coordRig is a Coordinator "me" of parts partitions run by loop, on real
// weft_partitions and weft_runners buckets and the fake clock it returns,
// not started; live is weft_runners.
func coordRig(t *testing.T, srv *natstest.Server, parts int, loop CommandLoop) (*Coordinator, *hooks, *clock.Fake, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := srv.JS.Stream(ctx, "KV_"+testBucket)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := &hooks{n: map[string]int{}, changed: make(chan struct{})}
	c := NewCoordinator(CoordinatorConfig{
		ID: "me", Lease: coordLease, Partitions: parts, Conn: srv.Conn,
		PartKV: kv, PartBucket: "weft_partitions", Live: live, LiveStream: stream, LiveBucket: testBucket,
		Clock: clk, Stamp: time.Now, Log: slog.New(slog.DiscardHandler), Hook: h.hook,
	}, loop)
	return c, h, clk, live
}

// docs/semantics.md §8 (a run can always be answered): Start claims the
// partitions assigned to this runner that nobody owns — a lone runner
// owns every partition at once — but acquires no run: the partition
// loop, whose first wake takes the owned partitions' runs over, starts
// with StartLoop, which the runner calls once it answers their commands
// (its forward subscription, its API). A Coordinator started and stopped
// without it has asked the command loop for no wake (Stop waits for the
// loop and its wake, had one started).
func TestSemantics8_StartClaimsButWakesNoRunUntilStartLoop(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	loop := &fakeLoop{}
	c, _, _, _ := coordRig(t, srv, 4, loop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Start(ctx)
	if owned := c.Owned(); !slices.Equal(owned, []int{0, 1, 2, 3}) {
		t.Fatalf("a lone runner's Start claimed %v, want [0 1 2 3]", owned)
	}
	c.Stop()
	if q, wakes := loop.calls(); q != 0 || len(wakes) != 0 {
		t.Fatalf("Start without StartLoop woke runs: %d quarantine watches, wakes %v", q, wakes)
	}
	c.Close()
}

// docs/adr/0019-partitions.md (a claimed partition's driver entries are
// woken) and docs/semantics.md §8 (a run stuck with work in flight is
// not left so): the partition loop's first wake lists every owned
// partition; a wake that failed leaves them due, and the loop's next
// wake, at a tick, lists them again; once a wake of them succeeded they
// are no longer listed (a scan with nothing due asks no wake). This is
// the loop's own path (wakeBeside through Table.Scan), with a command
// loop whose first wake fails.
func TestAFailedWakeLeavesThePartitionsDueForTheLoopsNextWake(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	loop := &fakeLoop{wakeOK: func(n int) bool { return n > 0 }}
	c, h, clk, _ := coordRig(t, srv, 4, loop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Start(ctx)
	defer c.Close()
	c.StartLoop()
	// A wake at a tick is skipped while the previous one still runs: the
	// test ticks until three wakes ended (the loop's 32nd tick scans every
	// owned partition again, a case of its own: not reached).
	h.wait(t, "partition-scanned", 1)
	for tick := 1; h.count("partition-scanned") < 3; tick++ {
		if tick >= 32 {
			t.Fatal("32 ticks and fewer than 3 wakes")
		}
		passes := h.count("partition-pass")
		clk.Advance(coordLease / 4)
		h.wait(t, "partition-pass", passes+1)
	}
	c.Stop()
	all := []int{0, 1, 2, 3}
	q, wakes := loop.calls()
	if len(wakes) != 2 || !slices.Equal(wakes[0], all) || !slices.Equal(wakes[1], all) {
		t.Fatalf("wakes asked %v, want %v (the first, failed) then %v again, then none", wakes, all, all)
	}
	if q < 3 {
		t.Fatalf("%d quarantine watches for %d wakes, want one each", q, h.count("partition-scanned"))
	}
}

// docs/semantics.md §8 (a release is graceful: a run this runner handed
// off is never driven by it again): a round that releases a partition (a
// peer it is assigned to joined) hands its runs off in the background;
// Stop, the drain's first step, ends the loop and waits for that release
// — its hand-off sees its context end and returns before Stop does — and
// no round passes after it. Close then waits for every goroutine the
// Coordinator started (none is left: goleak). Not parallel: it reads
// the process's goroutines.
func TestSemantics8_StopWaitsForTheReleasesInFlightAndCloseForEveryGoroutine(t *testing.T) {
	const parts = 8
	srv := natstest.Start(t)
	var peers []int
	for p := range parts {
		if partition.Owner(p, []string{"me", "peer"}) == "peer" {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		t.Fatal("partition.Owner gives the peer no partition: the case tells nothing")
	}
	asked, ended := make(chan int, parts), make(chan int, parts)
	proceed := make(chan struct{})
	var returned atomic.Int32
	loop := &fakeLoop{handOff: func(ctx context.Context, p int) HandOff {
		asked <- p
		<-ctx.Done() // Stop ends it
		ended <- p
		<-proceed
		returned.Add(1)
		return Stopped
	}}
	c, h, clk, live := coordRig(t, srv, parts, loop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := goleak.IgnoreCurrent()
	c.Start(ctx)
	c.StartLoop()
	h.wait(t, "partition-scanned", 1) // the loop's ticker is armed
	if owned := c.Owned(); len(owned) != parts {
		t.Fatalf("a lone runner's Start claimed %v, want all %d", owned, parts)
	}
	b, _ := json.Marshal(beat{Schema: 1, Partitions: parts})
	if _, err := live.Put(ctx, "peer", b); err != nil {
		t.Fatal(err)
	}
	// Once the view took the peer in, the next round releases the peer's
	// partitions.
	h.wait(t, "runners-view peer", 1)
	clk.Advance(coordLease / 4)
	for range peers {
		select {
		case p := <-asked:
			if !slices.Contains(peers, p) {
				t.Fatalf("partition %d released, not the peer's %v", p, peers)
			}
		case <-ctx.Done():
			t.Fatal("the peer's partitions were not all released once it joined")
		}
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); c.Stop() }()
	for range peers {
		<-ended
	}
	<-c.loopDone
	select {
	case <-stopped:
		t.Fatal("Stop returned with the releases' hand-offs in flight")
	default:
	}
	close(proceed)
	<-stopped
	if n := int(returned.Load()); n != len(peers) {
		t.Fatalf("Stop returned with %d of %d releases' hand-offs returned", n, len(peers))
	}
	passes := h.count("partition-pass")
	c.table.Kick()
	c.Close()
	if running := ownershipGoroutines(); len(running) > 0 {
		t.Fatalf("Close returned with %d goroutines of the package running:\n%s", len(running), strings.Join(running, "\n\n"))
	}
	if n := h.count("partition-pass"); n != passes {
		t.Fatalf("%d rounds passed after Stop", n-passes)
	}
	goleak.VerifyNone(t, before)
}

// ownershipGoroutines returns the stacks of the goroutines, but the
// caller's, that run a method of the Coordinator, the Table or the Peers
// or were started by one, at the instant it looks (goleak waits a while
// for goroutines to end: this does not).
func ownershipGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the caller's
		}
		for _, typ := range []string{"ownership.(*Coordinator)", "ownership.(*Table)", "ownership.(*Peers)"} {
			if strings.Contains(g, typ) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
