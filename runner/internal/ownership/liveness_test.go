package ownership

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 "only a runner that is gone is recovered from": the
// takeover of a gone runner's many runs judges it once per heartbeat
// interval (lease/4), not once per run — and not for longer: a runner
// judged gone a heartbeat interval ago is judged again (its key may be
// back). On the ownership clock, a fake one here.
func TestSemantics8_AGonePeerIsJudgedAgainAfterAHeartbeatInterval(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &Peers{cfg: Config{ID: "me", Lease: lease, Clock: clk}}
	if r.seenGone("peer") {
		t.Fatal("a peer never judged is seen gone")
	}
	r.markGone("peer")
	clk.Advance(lease/4 - time.Nanosecond)
	if !r.seenGone("peer") {
		t.Fatal("a peer judged gone less than a heartbeat interval ago is judged again")
	}
	clk.Advance(time.Nanosecond)
	if r.seenGone("peer") {
		t.Fatal("a peer judged gone a heartbeat interval ago is still taken as gone without a judgement")
	}
	if r.seenGone("peer") {
		t.Fatal("the expired judgement was kept")
	}
}

// stallingKV is a real weft_runners bucket whose Get (Put) of one key
// first runs stall (putStall), when set: a read (write) the server
// answers late, or across a reconnection.
type stallingKV struct {
	jetstream.KeyValue
	key             string
	stall, putStall func()
}

func (k *stallingKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if key == k.key && k.putStall != nil {
		k.putStall()
	}
	return k.KeyValue.Put(ctx, key, value)
}

func (k *stallingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == k.key && k.stall != nil {
		k.stall()
	}
	return k.KeyValue.Get(ctx, key)
}

// judgeRig is a runner "me" judging its peers on the fake clock clk,
// through a real weft_runners bucket on nc (no max age: the test's real
// time is not the runner's), its own key put by one heartbeat at clk's
// start, the start of its view. A peer that never wrote its key has no
// last message (partition.LastNone).
func judgeRig(t *testing.T, srv *natstest.Server, nc *nats.Conn, lease time.Duration) (*Peers, *stallingKV, *clock.Fake) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_"+testBucket)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	live := &stallingKV{KeyValue: kv, key: "me"}
	r := New(testConfig(nc, live, stream, lease, clk), testLoop{})
	if err := r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	return r, live, clk
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": a
// peer is judged as of the instant this runner began to look, before it
// read the peer's key. A look made a lease and a heartbeat interval into
// the view, at a peer whose key has no marker (it waits for the whole
// grace), whose read of this runner's own key is answered only after the
// whole grace passed, does not judge the peer gone: what it read says
// nothing of the time after it began. The next look, made after the
// grace, does. On the fake ownership clock; the stall moves it.
func TestSemantics8_APeerIsJudgedAsOfWhenTheLookBeganNotAfterAStalledRead(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	r, live, clk := judgeRig(t, srv, srv.Conn, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk.Advance(lease + lease/4) // partial: a key without a marker is not judged yet
	live.stall = func() { clk.Advance(r.judgeGrace()) }
	if !r.alive(ctx, "peer") {
		t.Fatal("a peer was judged gone by a look made before the whole grace, on a read of this runner's own key answered after it")
	}
	live.stall = nil
	if r.alive(ctx, "peer") {
		t.Fatal("a peer whose key is absent a whole grace into the view is not judged gone")
	}
}

// docs/semantics.md §8: a reconnection while this runner reads the facts
// of a peer (here during the read of its own key) cuts its view — the
// server may have restarted and cut the peer off too — so the peer is
// not judged gone at that look, however long the view was continuous
// before; the next look after a whole grace does.
func TestSemantics8_AReconnectionWhileAPeerIsJudgedMeansCannotTell(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	reconnected := make(chan struct{}, 1)
	nc := srv.Connect(nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	r, live, clk := judgeRig(t, srv, nc, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk.Advance(r.judgeGrace()) // full: any absent key is judged
	live.stall = func() {
		if err := nc.ForceReconnect(); err != nil {
			t.Error(err)
			return
		}
		select {
		case <-reconnected:
		case <-ctx.Done():
			t.Error("the connection never reconnected")
		}
	}
	if !r.alive(ctx, "peer") {
		t.Fatal("a peer was judged gone at a look during which this runner's connection reconnected")
	}
	live.stall = nil
	clk.Advance(r.judgeGrace())
	if r.alive(ctx, "peer") {
		t.Fatal("a peer whose key is absent a whole grace after the reconnection is not judged gone")
	}
}

// docs/semantics.md §8: alive gathers the facts it judges by from the
// store — the server's marker of an expired key, this runner's own key
// and whether that key is the beat it saw answered. Two peers' keys
// expired (the server's max age) before this runner's view began, at its
// start (fresh): a reconnect grace and a heartbeat interval later each
// is gone by the marker while this runner's own key is the beat it saw
// answered; once its own key is ahead of that beat (a beat in flight),
// the expiry computed from it would come out early, and the other peer
// is not judged at that look. On the fake ownership clock; the server's
// own expiry is waited for.
func TestSemantics8_AliveJudgesAMarkerOnlyWithItsOwnBeatAnswered(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage,
		TTL: 3 * time.Second, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := srv.JS.Stream(ctx, "KV_"+testBucket)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(testConfig(srv.Conn, kv, stream, lease, clk), testLoop{})
	for _, id := range []string{"peer1", "peer2"} {
		if _, err := kv.Put(ctx, id, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	// The server expires both keys at its max age and leaves its marker.
	for _, id := range []string{"peer1", "peer2"} {
		for {
			last, err := r.lastBeat(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := expiredAt(last); ok {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the server never expired %s's key", id)
			case <-time.After(50 * time.Millisecond): // polls the server's expiry; measures nothing
			}
		}
	}
	r.judged.start(clk.Now(), srv.Conn.Stats().Reconnects)
	if err := r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(r.judgeGrace() - lease/8) // partial; the markers are older than a reconnect grace and a heartbeat interval
	if r.alive(ctx, "peer1") {
		t.Fatal("a peer whose key expired a reconnect wait ago, by the server's marker, is not judged gone")
	}
	if _, err := kv.Put(ctx, "me", []byte("{}")); err != nil { // a beat not answered yet
		t.Fatal(err)
	}
	if !r.alive(ctx, "peer2") {
		t.Fatal("a peer was judged gone by a marker read against this runner's own key ahead of the beat it saw answered")
	}
}

// docs/semantics.md §8: a beat sent before a reconnection that this
// runner noticed while the put was in flight may precede a server
// restart: it is not the first beat of the period of view that the
// reconnection began, even when both periods begin at the same instant
// of the ownership clock (a fake one here, not advanced). Taken as the
// first beat, a peer's put seen after it would let beatInView judge the
// peer gone by an order the restart broke.
func TestSemantics8_ABeatSentBeforeANoticedReconnectionIsNotThePeriodsFirst(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	reconnected := make(chan struct{}, 1)
	nc := srv.Connect(nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	r, live, _ := judgeRig(t, srv, nc, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.judged.mu.Lock()
	if r.judged.judge.first == 0 {
		t.Fatal("the rig's first beat was not taken as its period's first")
	}
	r.judged.mu.Unlock()
	rc := nc.Stats().Reconnects
	live.putStall = func() {
		if err := nc.ForceReconnect(); err != nil {
			t.Error(err)
			return
		}
		select {
		case <-reconnected:
		case <-ctx.Done():
			t.Error("the connection never reconnected")
		}
		if _, _, _, cut := r.viewPeriod(rc); !cut { // noticed: a new period begins
			t.Error("the reconnection was not noticed")
		}
	}
	if err := r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	r.judged.mu.Lock()
	first := r.judged.judge.first
	r.judged.mu.Unlock()
	if first != 0 {
		t.Fatalf("a beat sent before a reconnection was taken as the new period's first (revision %d)", first)
	}
}

// docs/semantics.md §8: a heartbeat of this runner's that fails while it
// reads the facts of a peer begins a new period of view (the server may
// have restarted: its peers cannot beat either), so the peer is not judged
// gone at that look, however long the view was continuous before.
func TestSemantics8_AFailedHeartbeatWhileAPeerIsJudgedMeansCannotTell(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := natstest.Start(t)
	r, live, clk := judgeRig(t, srv, srv.Conn, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk.Advance(r.judgeGrace()) // full: any absent key is judged
	live.stall = func() {
		failed, fail := context.WithCancel(ctx)
		fail()
		if err := r.Heartbeat(failed); err == nil {
			t.Error("a heartbeat with its context ended did not fail")
		}
	}
	if !r.alive(ctx, "peer") {
		t.Fatal("a peer was judged gone at a look during which this runner's heartbeat failed")
	}
}

// testBucket is the runners bucket of the tests (the runner's
// weft_runners).
const testBucket = "weft_runners"

// testLoop is the command loop of a test's Peers: not draining; a change
// of the runners is nobody's business.
type testLoop struct{}

func (testLoop) Draining() bool  { return false }
func (testLoop) RunnersChanged() {}

// testConfig is the Config of a runner "me" of a deployment of 64
// partitions on nc, judging by live (whose stream is stream) on clk.
func testConfig(nc *nats.Conn, live jetstream.KeyValue, stream jetstream.Stream, lease time.Duration, clk clock.Clock) Config {
	return Config{ID: "me", Lease: lease, Partitions: 64, Conn: nc, Live: live, LiveStream: stream, Bucket: testBucket,
		Clock: clk, Stamp: time.Now, Log: slog.New(slog.DiscardHandler)}
}
