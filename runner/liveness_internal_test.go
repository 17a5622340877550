package runner

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
	r := &Runner{id: "me", lease: lease, partitionOwnership: partitionOwnership{clk: clk}}
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

// stallingKV is a real weft_runners bucket whose Get of one key first
// runs stall, when set: a read the server answers late, or across a
// reconnection.
type stallingKV struct {
	jetstream.KeyValue
	key   string
	stall func()
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
func judgeRig(t *testing.T, srv *natstest.Server, nc *nats.Conn, lease time.Duration) (*Runner, *stallingKV, *clock.Fake) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RunnersBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_"+RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	live := &stallingKV{KeyValue: kv, key: "me"}
	r := &Runner{id: "me", lease: lease, now: time.Now, nc: nc, log: slog.New(slog.DiscardHandler),
		partitionOwnership: partitionOwnership{clk: clk, nparts: DefaultPartitions, live: live, liveStream: stream, runners: newRunnersView()}}
	r.peers.start(clk.Now(), nc.Stats().Reconnects)
	if err := r.heartbeat(ctx); err != nil {
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
