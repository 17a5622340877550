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
// nth call, from 0), a round's hand-off with handOff, and calls watch,
// when set, in the nth WatchQuarantined (a wake's first step, from 0),
// and draining, when set, in Draining (a beat asks it).
type fakeLoop struct {
	mu          sync.Mutex
	quarantined int     // WatchQuarantined calls
	wakes       [][]int // WakePartitions calls' due lists
	wakeOK      func(n int) bool
	handOff     func(ctx context.Context, p int) HandOff
	watch       func(ctx context.Context, n int)
	draining    func()
}

func (l *fakeLoop) Draining() bool {
	if l.draining != nil {
		l.draining()
	}
	return false
}

func (*fakeLoop) ForgetPartition(context.Context, int, bool) { /* holds no run */ }
func (*fakeLoop) Unbounded(int) bool                         { return false }
func (l *fakeLoop) WatchQuarantined(ctx context.Context) {
	l.mu.Lock()
	n := l.quarantined
	l.quarantined++
	l.mu.Unlock()
	if l.watch != nil {
		l.watch(ctx, n)
	}
}

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
	// Stop waited for the loop's last wake: each wake watched the
	// quarantined runs once and ended.
	if scanned := h.count("partition-scanned"); q != scanned {
		t.Fatalf("%d quarantine watches for %d wakes, want one each", q, scanned)
	}
}

// docs/semantics.md §8 (a release is graceful: a run this runner handed
// off is never driven by it again): a round that releases a partition (a
// peer it is assigned to joined) hands its runs off in the background;
// Stop, the drain's first step, ends the loop and waits for it (and for
// its wake in flight) before it waits for that release — else a round
// could start a release after that wait — and for the release: its
// hand-off sees its context end and returns before Stop does. No round
// passes after Stop. Close then waits for every goroutine the
// Coordinator started (none is left: goleak). The test holds the loop's
// wake until Stop is seen waiting for the loop's end (parked in its
// receive, not in the releases' wait), and the releases' hand-offs until
// after; then a heartbeat's beat until Close is seen waiting for its
// goroutines. Not parallel: it reads the process's goroutines.
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
	held, wakeGo := make(chan struct{}, 1), make(chan struct{})
	var holdBeat atomic.Bool
	beating, beatGo := make(chan struct{}, 1), make(chan struct{})
	loop := &fakeLoop{
		handOff: func(ctx context.Context, p int) HandOff {
			asked <- p
			<-ctx.Done() // Stop ends it
			ended <- p
			<-proceed
			returned.Add(1)
			return Stopped
		},
		// The loop's first wake ends at once; its second, after a round,
		// is held until Stop ended its context and the test lets it go.
		watch: func(ctx context.Context, n int) {
			if n == 1 {
				held <- struct{}{}
				<-ctx.Done()
				<-wakeGo
			}
		},
		// Once armed, the heartbeat loop's next beat is held until the
		// test lets it go.
		draining: func() {
			if holdBeat.Load() && strings.Contains(goroutineStack(goroutineID()), "ownership.(*Peers).HeartbeatLoop(") && holdBeat.CompareAndSwap(true, false) {
				beating <- struct{}{}
				<-beatGo
			}
		},
	}
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
		p := recv(ctx, t, asked, "the peer's partitions were not all released once it joined")
		if !slices.Contains(peers, p) {
			t.Fatalf("partition %d released, not the peer's %v", p, peers)
		}
	}
	recv(ctx, t, held, "the loop started no wake after a round")
	stopped, stopper := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(stopped)
		stopper <- goroutineID()
		c.Stop()
	}()
	id := recv(ctx, t, stopper, "the goroutine calling Stop did not start")
	for range peers {
		recv(ctx, t, ended, "Stop did not end the releases' hand-offs")
	}
	waitStopWaitsForTheLoop(ctx, t, id, stopped)
	close(wakeGo)
	select {
	case <-stopped:
		t.Fatal("Stop returned with the releases' hand-offs in flight")
	default:
	}
	close(proceed)
	recv(ctx, t, stopped, "Stop did not return once the releases' hand-offs returned")
	select {
	case <-c.loopDone:
	default:
		t.Fatal("Stop returned before the partition loop ended")
	}
	if n := int(returned.Load()); n != len(peers) {
		t.Fatalf("Stop returned with %d of %d releases' hand-offs returned", n, len(peers))
	}
	passes := h.count("partition-pass")
	c.table.Kick()
	holdBeat.Store(true)
	clk.Advance(coordLease / 4)
	recv(ctx, t, beating, "the heartbeat loop did not beat at its tick")
	closed, closer := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(closed)
		closer <- goroutineID()
		c.Close()
	}()
	id = recv(ctx, t, closer, "the goroutine calling Close did not start")
	waitParkedIn(ctx, t, id, closed, "ownership.(*Coordinator).Close(", "errgroup.(*Group).Wait(", "Close returned with the heartbeat's beat in flight")
	close(beatGo)
	recv(ctx, t, closed, "Close did not return once the beat ended")
	if running := ownershipGoroutines(); len(running) > 0 {
		t.Fatalf("Close returned with %d goroutines of the package running:\n%s", len(running), strings.Join(running, "\n\n"))
	}
	if n := h.count("partition-pass"); n != passes {
		t.Fatalf("%d rounds passed after Stop", n-passes)
	}
	goleak.VerifyNone(t, before)
}

// recv returns what ch gives, or fails the test with msg once ctx ended
// (a bound on the store's answers and the Coordinator's goroutines, not
// a measure).
func recv[T any](ctx context.Context, t *testing.T, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal(msg)
		panic("unreachable")
	}
}

// waitParkedIn returns once goroutine id is seen parked (not running)
// in function in, in wait. It fails the test with returned when done is
// closed first, or when ctx ends first.
func waitParkedIn(ctx context.Context, t *testing.T, id string, done <-chan struct{}, in, wait, returned string) {
	t.Helper()
	for {
		select {
		case <-done:
			t.Fatal(returned)
		default:
		}
		st := goroutineStack(id)
		if !strings.HasPrefix(st, "goroutine "+id+" [running") && strings.Contains(st, in) && strings.Contains(st, wait) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("goroutine %s is not seen waiting in %s, in %s:\n%s", id, in, wait, st)
		case <-time.After(time.Millisecond):
		}
	}
}

// waitStopWaitsForTheLoop returns once goroutine id, which calls Stop
// while the partition loop cannot end (its wake held), is seen parked in
// Stop's receive of the loop's end. It fails the test when Stop returned
// meanwhile or waits for the releases instead (a round could then start
// a release after that wait), or when ctx ends first.
func waitStopWaitsForTheLoop(ctx context.Context, t *testing.T, id string, stopped <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-stopped:
			t.Fatal("Stop returned before the partition loop ended (its wake is held)")
		default:
		}
		st := goroutineStack(id)
		if strings.Contains(st, "sync.(*WaitGroup).Wait(") {
			t.Fatalf("Stop waits for the releases while the partition loop runs (its wake is held):\n%s", st)
		}
		if strings.HasPrefix(st, "goroutine "+id+" [chan receive") && strings.Contains(st, "ownership.(*Coordinator).Stop(") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Stop is not seen waiting for the partition loop:\n%s", st)
		case <-time.After(time.Millisecond):
		}
	}
}

// goroutines returns the stacks of every goroutine, the caller's first.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID returns the caller's goroutine's number.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// goroutineStack returns the stack of goroutine id ("" once it ended).
func goroutineStack(id string) string {
	for _, g := range goroutines() {
		if strings.HasPrefix(g, "goroutine "+id+" [") {
			return g
		}
	}
	return ""
}

// ownershipGoroutines returns the stacks of the goroutines, but the
// caller's, that run a method of the Coordinator, the Table or the Peers
// or were started by one. goleak waits a while for every goroutine to
// end; this does not, but for one kind: a goroutine a Coordinator's
// method started whose stack holds nothing of the package but its own
// function (returning, see returning). Stop and Close waited for its
// Done, so it has nothing left to run but its return: those are looked
// at again until they are gone (for up to 5 s, a bound, not a measure),
// and returned if they stay. Any other is returned at once, so a
// sequential test of the package that leaves such a goroutine running
// fails its caller.
func ownershipGoroutines() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var running, leaving []string
		for _, g := range goroutines()[1:] { // the caller's first
			switch {
			case !ofOwnership(g):
			case returning(g):
				leaving = append(leaving, g)
			default:
				running = append(running, g)
			}
		}
		if len(running) > 0 || len(leaving) == 0 || time.Now().After(deadline) {
			return append(running, leaving...)
		}
		// wall clock: a poll, bounded at 5 s, of goroutines that have only their return left
		time.Sleep(time.Millisecond)
	}
}

// ofOwnership reports whether stack g runs a method of the Coordinator,
// the Table or the Peers or was started by one.
func ofOwnership(g string) bool {
	for _, typ := range []string{"ownership.(*Coordinator)", "ownership.(*Table)", "ownership.(*Peers)"} {
		if strings.Contains(g, typ) {
			return true
		}
	}
	return false
}

// returning reports whether stack g is of a goroutine started by a
// Coordinator's method (a release's, a wake's) that runs nothing but its
// own function (and the closures it defers: the WaitGroup's Done) and
// the packages sync and runtime: it is in its Done, or past it, or not
// started yet (then it stays: the caller looks again).
func returning(g string) bool {
	var frames []string
	creator := ""
	for _, line := range strings.Split(g, "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "\t"):
		case strings.HasPrefix(line, "created by "):
			creator = strings.TrimPrefix(line, "created by ")
		case strings.HasPrefix(line, "..."):
			return false // frames elided
		default:
			if i := strings.LastIndex(line, "("); i > 0 {
				line = line[:i]
			}
			frames = append(frames, line)
		}
	}
	if len(frames) == 0 || !strings.Contains(creator, "ownership.(*Coordinator).") {
		return false
	}
	entry := frames[len(frames)-1]
	if !strings.Contains(entry, "ownership.(*Coordinator).") {
		return false
	}
	for _, f := range frames {
		if f != entry && !strings.HasPrefix(f, entry+".") &&
			!strings.HasPrefix(f, "sync.") && !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") {
			return false
		}
	}
	return true
}

// returning tells a goroutine of the Coordinator that is only returning
// (in or past its WaitGroup's Done) from one that runs something of the
// package, and from goroutines the Coordinator did not start (the
// errgroup's): ownershipGoroutines waits only for the first kind.
func TestReturningTellsAGoroutineOnlyReturning(t *testing.T) {
	t.Parallel()
	const own = "github.com/weftrun/weft/runner/internal/ownership."
	for _, c := range []struct {
		stack string
		want  bool
	}{
		{"goroutine 9 [runnable]:\n" + own + "(*Coordinator).pass.func1.1()\n\tloop.go:93 +0x6f\ncreated by " + own + "(*Coordinator).pass.func1 in goroutine 7\n\tloop.go:90 +0x8d", true},
		{"goroutine 9 [runnable]:\nsync.(*WaitGroup).Add(0xc0, 0xffffffffffffffff)\n\twaitgroup.go:100 +0x1\nsync.(*WaitGroup).Done(...)\n\twaitgroup.go:130\n" + own + "(*Coordinator).wakeBeside.func1()\n\tloop.go:79 +0x6f\ncreated by " + own + "(*Coordinator).wakeBeside in goroutine 7\n\tloop.go:73 +0x8d", true},
		{"goroutine 9 [select]:\n" + own + "(*Table).Release(0xc0, {0x1, 0x2}, 0x3, 0x4, 0x5)\n\ttable.go:300 +0x1\n" + own + "(*Coordinator).release(...)\n\tloop.go:110\n" + own + "(*Coordinator).pass.func1.1()\n\tloop.go:92 +0x6f\ncreated by " + own + "(*Coordinator).pass.func1 in goroutine 7\n\tloop.go:90 +0x8d", false},
		{"goroutine 9 [select]:\n" + own + "(*Peers).HeartbeatLoop(0xc0, {0x1, 0x2})\n\tliveness.go:123 +0x1\n" + own + "(*Coordinator).Start.func4()\n\tcoordinator.go:179 +0x1\n" + own + "(*Coordinator).goDo.func1()\n\tcoordinator.go:208 +0x1\ngolang.org/x/sync/errgroup.(*Group).Go.func1()\n\terrgroup.go:93 +0x1\ncreated by golang.org/x/sync/errgroup.(*Group).Go in goroutine 7\n\terrgroup.go:78 +0x1", false},
	} {
		if got := returning(c.stack); got != c.want {
			t.Errorf("returning = %v, want %v, for:\n%s", got, c.want, c.stack)
		}
	}
}
