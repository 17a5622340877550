package runner_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// markerWindow leaves the marker of a removed weft_drivers entry on
// run's key and makes it expire in the window of nats.go's
// KeyValue.Create: Create's write "only if the key has no message" is
// refused because of the marker, then Create reads the key to learn the
// marker's revision — and the marker is gone by then (its TTL ended).
// The expiry is brought forward deterministically: the runner's JetStream
// context is traced (jetstream.WithClientTrace) and, just before its
// first read of the key is sent, the test purges the key's subject from
// the stream, which is what the marker's expiry does.
type markerWindow struct {
	t    *testing.T
	st   jetstream.Stream
	subj string
	once sync.Once
	// found reports whether the marker was still the key's last message
	// when the read was about to be sent (the window was hit).
	found bool
}

func (h *harness) markerWindow(run string) (*markerWindow, []jetstream.JetStreamOpt) {
	h.t.Helper()
	c := ctx(h.t)
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	key := runner.DriverKey(run, runner.DefaultPartitions)
	if _, err := kv.Put(c, key, []byte("earlier")); err != nil {
		h.t.Fatal(err)
	}
	// A marker as removeDriverKey leaves, not expired yet.
	if err := kv.Purge(c, key, jetstream.PurgeTTL(time.Hour)); err != nil {
		h.t.Fatal(err)
	}
	st, err := h.srv.JS.Stream(c, "KV_"+runner.DriversBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	w := &markerWindow{t: h.t, st: st, subj: "$KV." + runner.DriversBucket + "." + key}
	trace := &jetstream.ClientTrace{RequestSent: func(subj string, payload []byte) {
		if !strings.Contains(subj, w.subj) && !bytes.Contains(payload, []byte(w.subj)) {
			return
		}
		w.once.Do(w.expire)
	}}
	return w, []jetstream.JetStreamOpt{jetstream.WithClientTrace(trace)}
}

func (w *markerWindow) expire() {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := w.st.GetLastMsgForSubject(c, w.subj)
	w.found = err == nil && m.Header.Get("KV-Operation") == "PURGE"
	if err := w.st.Purge(c, jetstream.WithPurgeSubject(w.subj)); err != nil {
		w.t.Errorf("expire the marker of %s: %v", w.subj, err)
	}
}

// driverEntry reads run's weft_drivers entry: the runner it names, or ""
// when it has none.
func (h *harness) driverEntry(run string) string {
	h.t.Helper()
	c := ctx(h.t)
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := kv.Get(c, runner.DriverKey(run, runner.DefaultPartitions))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return string(e.Value())
}

// docs/semantics.md §8 "work not recorded is derived again from the log, never
// dropped": a start writes its driver intent before the
// run's first event, so that a crash right after the append leaves a run
// the owner of its partition finds. When the key's last message is the
// marker of an earlier removal and the marker expires while Create reads
// it back, Create answers "the key exists" though nothing is there: the
// start must not take that for another start's intent and append with no
// entry (a crash before act puts the key would strand the run: no scan
// finds it, no command or timer will reach it).
func TestSemantics8_AStartWhoseKeysMarkerExpiresStillWritesItsIntent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "mk-start"
	w, jsOpts := h.markerWindow(run)
	atAppend := make(chan string, 1)
	hook := func(event string, _ int, id string) {
		if event == "start-appended" && id == run {
			atAppend <- h.driverEntry(run)
		}
	}
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	r, _ := h.startRunnerJS(jsOpts, []*agent.Agent{a}, runner.WithHook(hook))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if !w.found {
		t.Fatal("the start's Create did not read the key while its marker was there: the window was not reproduced")
	}
	select {
	case got := <-atAppend:
		if got != r.ID() {
			t.Fatalf("when the start's first event was appended, the run's driver entry named %q; want this runner %q (its intent)", got, r.ID())
		}
	default:
		t.Fatal("the start's append was never reported")
	}
	h.waitStatus(run, aggregate.StatusFinished)
}

// docs/semantics.md §8, the rebuild of the driver entries from the
// log: an unfinished run of a gone runner without an entry, whose key's
// last message is an expiring marker, gets its entry although Create
// answers "the key exists" when the marker expires while Create reads it
// back — a run taken for "put meanwhile by its driver" would be left
// without one, the rebuild marked done, and the run never recovered.
func TestSemantics8_ARebuildWhoseKeysMarkerExpiresStillRebuildsTheEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "mk-rebuild"
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	w, jsOpts := h.markerWindow(run)
	// On the fake ownership clock: the judgement's grace (the ghost's key
	// was never written) passes by hand once the rebuild is done.
	clk := newOwnClock(t)
	r, _ := h.startRunnerJS(jsOpts, []*agent.Agent{a}, clk.options(nil)...)
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := kv.Get(c, "rebuilt"); err == nil {
			break
		}
		if c.Err() != nil {
			t.Fatal(`"rebuilt" was never put`)
		}
		// wall clock: a poll of the rebuild's marker: the rebuild is made as the runner starts, not on ownership's time
		time.Sleep(10 * time.Millisecond)
	}
	if !w.found {
		t.Fatal("the rebuild's Create did not read the key while its marker was there: the window was not reproduced")
	}
	// The entry is there, or was already used: the recovery is appended
	// before a finished run's entry is removed.
	if h.driverEntry(run) == "" && len(h.recoveries(run)) == 0 {
		t.Fatal(`the rebuild was marked done ("rebuilt") with the unfinished run left without its driver entry: no scan will ever find it`)
	}
	clk.pass(clk.judgeGrace())
	clk.follow()
	if o, _ := h.waitStatus(run, aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("%s ended %s", run, events.DescribeOutcome(o))
	}
	if rr := h.recoveries(run); len(rr) != 1 || rr[0].Previous != "ghost" || rr[0].Runner != r.ID() {
		t.Errorf("recoveries %+v, want one from ghost", rr)
	}
}
