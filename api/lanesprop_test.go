package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"pgregory.net/rapid"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
)

// startPlan is what the fake backend does with one start: it holds
// holdBefore on its lane, then answers its error fail when it has one
// and not errAfter (on its lane), else releases its lane when release
// (twice when releaseTwice: the release is idempotent), holds holdAfter,
// then answers its error (errAfter) or a success.
type startPlan struct {
	release, releaseTwice bool
	holdBefore, holdAfter time.Duration
	fail                  int // 0 no error, else an index of propErrors
	errAfter              bool
}

// released says whether the start's answer goes out after its lane's
// release (published to the reply subject, not through the micro
// request).
func (p startPlan) released() bool { return p.release && (p.fail == 0 || p.errAfter) }

// propErrors are the errors a start's backend may give: two coded ones
// and an uncoded one (answered internal). The messages name no run, so
// that every answer of one error is the same message.
var propErrors = []error{
	nil,
	&weft.Error{Code: weft.CodeAlreadyStarted, Message: "the run is already started"},
	&weft.Error{Code: weft.CodeUnavailable, Message: "the append was not answered"},
	errors.New("the backend failed"),
}

// propBackend runs each start by its plan (startPlan, by run id) and
// counts what the lanes' invariants are about: the starts in its Start at
// once (running, at most the bound of starts in flight), those of them
// that did not release their lanes yet (onLane, at most the lanes), how
// many times each run was handed to it, and whether Quiet was ever closed
// while a start ran.
type propBackend struct {
	slowBackend
	plans map[string]startPlan
	svc   atomic.Pointer[api.Service]

	mu                    sync.Mutex
	running, onLane       int
	maxRunning, maxOnLane int
	entered               map[string]int
	enteredCh             chan struct{} // one send per Start entered
	quietWhileRunning     []string
}

func (b *propBackend) enter(run string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running++
	b.onLane++
	b.maxRunning = max(b.maxRunning, b.running)
	b.maxOnLane = max(b.maxOnLane, b.onLane)
	b.entered[run]++
	b.checkQuiet(run)
}

// checkQuiet notes run when Quiet is closed while run is in its backend
// (admitted, not answered). b.mu is held.
func (b *propBackend) checkQuiet(run string) {
	if svc := b.svc.Load(); svc != nil {
		select {
		case <-(*svc).Quiet():
			b.quietWhileRunning = append(b.quietWhileRunning, run)
		default:
		}
	}
}

// offLane counts the start off its lane: before the lane is released, so
// that the count is never below the lanes actually held.
func (b *propBackend) offLane() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onLane--
}

func (b *propBackend) Start(ctx context.Context, req api.StartRequest) (api.StartReply, error) {
	p, ok := b.plans[req.Run]
	if !ok {
		return api.StartReply{}, fmt.Errorf("no plan for run %q", req.Run)
	}
	b.enter(req.Run)
	select {
	case b.enteredCh <- struct{}{}:
	default: // a start entered twice: the checks say so
	}
	lane := true
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.checkQuiet(req.Run)
		b.running--
		if lane {
			b.onLane--
		}
	}()
	time.Sleep(p.holdBefore)
	if p.fail != 0 && !p.errAfter {
		return api.StartReply{}, propErrors[p.fail]
	}
	if p.release {
		b.offLane()
		lane = false
		api.ReleaseLane(ctx)
		if p.releaseTwice {
			api.ReleaseLane(ctx)
		}
	}
	time.Sleep(p.holdAfter)
	if p.fail != 0 {
		return api.StartReply{}, propErrors[p.fail]
	}
	return api.StartReply{Schema: api.Schema, Run: req.Run, Status: "working"}, nil
}

func newPropBackend(plans map[string]startPlan) *propBackend {
	return &propBackend{plans: plans, entered: map[string]int{}, enteredCh: make(chan struct{}, len(plans))}
}

// laneErrorReferences answers each of propErrors once on a lane that is
// never released, and returns the answers: the error answer of a start
// that released its lane must be the same message.
func laneErrorReferences(t *testing.T, srv *natstest.Server) map[int]*nats.Msg {
	t.Helper()
	plans := map[string]startPlan{}
	for i := 1; i < len(propErrors); i++ {
		plans["ref-"+strconv.Itoa(i)] = startPlan{fail: i}
	}
	b := newPropBackend(plans)
	svc, err := api.Serve(srv.Conn, b, nil, "0.0.0", api.WithLanes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	nc := srv.Connect()
	refs := map[int]*nats.Msg{}
	for i := 1; i < len(propErrors); i++ {
		body, _ := json.Marshal(api.StartRequest{Schema: api.Schema, Run: "ref-" + strconv.Itoa(i), Agent: "desk", Input: "x"})
		m, err := nc.Request("weft.api.start", body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Nats-Service-Error") == "" {
			t.Fatalf("reference %d: answer %s without the error headers (%v)", i, m.Data, m.Header)
		}
		refs[i] = m
	}
	return refs
}

// Commands are answered (docs/semantics.md §8, "A run can always be
// answered"), over random start lanes
// (docs/adr/0041-a-start-s-reads-and-lane.md): 1 to 4 lanes, a bound of
// 1 to 6 starts in flight, 1 to 20 starts sent together, each of which
// holds its lane a little, releases it or not (once or twice), holds a
// little more and answers a success or an error before or after its
// release; and a Stop at a drawn point (after some of the starts were
// sent and some of those entered their backend), its unsubscriptions
// flushed to the server or not. For every such run:
//
//   - every start is answered exactly once: each start the server held
//     before Stop was called (sent and flushed before it) is answered by
//     its backend once; a start sent after Stop is answered once, either
//     by its backend (a lane still subscribed took it) or by the server's
//     no-responders status (503, empty body), never both — and always
//     the latter once Stop's unsubscriptions reached the server
//     (flushed); no answer comes twice, also after Stop and after Quiet;
//   - an error answer is the same message — the error headers
//     (Nats-Service-Error, Nats-Service-Error-Code) and the ErrorReply
//     body — whether it was given on its lane or after the release
//     (compared with the answers of a lane that never released its
//     start), and a success is the start's own reply without them;
//   - at most max(bound, lanes) starts are in their backend at once, and
//     at most lanes of them before their release (a lane serves one start
//     until it is released or answered);
//   - each start reaches its backend once, and only if it was answered by
//     it; Quiet is open while any start is in its backend and is closed
//     once every start taken is answered;
//   - without Stop, the lanes' stats count every start and, as errors,
//     exactly the errors answered on a lane (docs/protocol/40-commands.md:
//     an error after the release is not in the stats).
func TestSemantics8_StartLanesAnswerEachStartOnceAtAnyBoundAndStop(t *testing.T) {
	// Each check serves and stops a service on one real server: 200
	// random runs unless -rapid.checks says otherwise (about 2 s here),
	// from a fixed seed so that CI runs the same draws every time (the
	// timings differ: which lane takes which start is the server's
	// choice); -rapid.seed explores others.
	for name, v := range map[string]string{"rapid.checks": "200", "rapid.seed": "20261207"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() == f.DefValue {
			if err := f.Value.Set(v); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
		}
	}
	srv := natstest.Start(t)
	refs := laneErrorReferences(t, srv)
	var seen struct{ stops, stopsFlushed, noResponders, takenAfterStop, errOnLane, errReleased, aboveLanes, checks int }
	t.Cleanup(func() { t.Logf("coverage: %+v", seen) })
	rapid.Check(t, func(rt *rapid.T) {
		seen.checks++
		lanes := rapid.IntRange(1, 4).Draw(rt, "lanes")
		bound := rapid.IntRange(1, 6).Draw(rt, "bound")
		n := rapid.IntRange(1, 20).Draw(rt, "starts")
		plans := map[string]startPlan{}
		order := make([]startPlan, n)
		for i := range n {
			p := startPlan{
				release:    rapid.Bool().Draw(rt, "release"),
				holdBefore: time.Duration(rapid.IntRange(0, 2000).Draw(rt, "holdBefore_us")) * time.Microsecond,
				holdAfter:  time.Duration(rapid.IntRange(0, 3000).Draw(rt, "holdAfter_us")) * time.Microsecond,
				fail:       rapid.IntRange(0, len(propErrors)-1).Draw(rt, "fail"),
			}
			if p.fail != 0 && rapid.IntRange(0, 2).Draw(rt, "failKind") > 0 {
				p.fail = 0 // two starts in three succeed
			}
			if p.fail != 0 {
				p.errAfter = rapid.Bool().Draw(rt, "errAfter")
			}
			if p.release {
				p.releaseTwice = rapid.IntRange(0, 3).Draw(rt, "releaseTwice") == 0
			}
			plans["r"+strconv.Itoa(i)] = p
			order[i] = p
		}
		stopAt := -1 // before the start of this index is sent; n: after all
		entered, flushStop := 0, false
		if rapid.Bool().Draw(rt, "stop") {
			stopAt = rapid.IntRange(0, n).Draw(rt, "stopAt")
			entered = rapid.IntRange(0, stopAt).Draw(rt, "stopAfterEntered")
			flushStop = rapid.Bool().Draw(rt, "flushStop")
		}

		b := newPropBackend(plans)
		// The service's own connection, closed at the end, so that no
		// lane of this run takes a start of the next.
		snc, err := nats.Connect(srv.URL)
		if err != nil {
			rt.Fatal(err)
		}
		defer snc.Close()
		svc, err := api.Serve(snc, b, nil, "0.0.0", api.WithLanes(lanes), api.WithStartsInFlight(bound))
		if err != nil {
			rt.Fatal(err)
		}
		b.svc.Store(&svc)
		stopped := false
		defer func() {
			if !stopped {
				_ = svc.Stop()
			}
		}()
		nc, err := nats.Connect(srv.URL)
		if err != nil {
			rt.Fatal(err)
		}
		defer nc.Close()
		inbox := nc.NewInbox()
		// A channel, not a synchronous subscription (whose NextMsg turns
		// a no-responders status into an error without its subject): the
		// connection's reader puts each message in it before it reads
		// the next, so after a flush every answer sent before is in it.
		inboxCh := make(chan *nats.Msg, 2*n+16)
		sub, err := nc.ChanSubscribe(inbox+".>", inboxCh)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.Flush(); err != nil {
			rt.Fatal(err)
		}

		// afterStop[i]: start i was sent after Stop was called;
		// afterUnsub[i]: after Stop's unsubscriptions reached the server.
		afterStop, afterUnsub := make([]bool, n), make([]bool, n)
		stop := func() {
			if err := nc.Flush(); err != nil {
				rt.Fatal(err)
			}
			for range entered {
				select {
				case <-b.enteredCh:
				case <-time.After(10 * time.Second):
					rt.Fatalf("fewer than %d starts entered their backend within 10 s", entered)
				}
			}
			if err := svc.Stop(); err != nil {
				rt.Fatal(err)
			}
			stopped = true
			seen.stops++
			if flushStop {
				if err := snc.Flush(); err != nil {
					rt.Fatal(err)
				}
				seen.stopsFlushed++
			}
		}
		for i := range n {
			if i == stopAt {
				stop()
			}
			afterStop[i], afterUnsub[i] = stopped, stopped && flushStop
			body, _ := json.Marshal(api.StartRequest{Schema: api.Schema, Run: "r" + strconv.Itoa(i), Agent: "desk", Input: "x"})
			if err := nc.PublishRequest("weft.api.start", inbox+"."+strconv.Itoa(i), body); err != nil {
				rt.Fatal(err)
			}
		}
		if stopAt == n {
			stop()
		}

		// Every start's answer, exactly one each.
		answers := make([]*nats.Msg, n)
		check := func(m *nats.Msg) {
			i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, inbox+"."))
			if err != nil || i < 0 || i >= n {
				rt.Fatalf("an answer on %s, which no start was sent with", m.Subject)
			}
			if prev := answers[i]; prev != nil {
				rt.Fatalf("start r%d (%+v) answered twice: %s (headers %v), then %s (headers %v)", i, order[i], prev.Data, prev.Header, m.Data, m.Header)
			}
			answers[i] = m
			if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
				if !afterStop[i] {
					rt.Fatalf("start r%d, sent before Stop, found no responders", i)
				}
				seen.noResponders++
				return
			}
			if afterUnsub[i] {
				rt.Fatalf("start r%d, sent after Stop's unsubscriptions reached the server, was answered %s", i, m.Data)
			}
			if afterStop[i] {
				seen.takenAfterStop++
			}
			p := order[i]
			if p.fail == 0 {
				var rep api.StartReply
				if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Run != "r"+strconv.Itoa(i) || len(m.Header) != 0 {
					rt.Fatalf("start r%d (%+v): answer %s (%v, headers %v), want its success", i, p, m.Data, err, m.Header)
				}
				return
			}
			ref := refs[p.fail]
			if string(m.Data) != string(ref.Data) || !reflect.DeepEqual(m.Header, ref.Header) {
				rt.Fatalf("start r%d (%+v, released %v): error answer %s (headers %v), want the lane's own %s (headers %v)",
					i, p, p.released(), m.Data, m.Header, ref.Data, ref.Header)
			}
			if p.released() {
				seen.errReleased++
			} else {
				seen.errOnLane++
			}
		}
		for got := 0; got < n; got++ {
			select {
			case m := <-inboxCh:
				check(m)
			case <-time.After(10 * time.Second):
				missing := []int{}
				for i, a := range answers {
					if a == nil {
						missing = append(missing, i)
					}
				}
				rt.Fatalf("starts %v not answered within 10 s (stop before %d, flushed %v)", missing, stopAt, flushStop)
			}
		}

		// Without Stop: the stats count every start, and as errors those
		// answered on their lanes. They are counted when the lane
		// returns, which may be just after the answer left.
		if !stopped {
			onLane := 0
			for _, p := range order {
				if p.fail != 0 && !p.released() {
					onLane++
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				reqs, errs := 0, 0
				for _, e := range svc.Stats().Endpoints {
					if e.Subject == "weft.api.start" {
						reqs += e.NumRequests
						errs += e.NumErrors
					}
				}
				if reqs == n {
					if errs != onLane {
						rt.Fatalf("stats count %d errors of %d starts, want the %d answered on their lanes", errs, n, onLane)
					}
					break
				}
				if time.Now().After(deadline) {
					rt.Fatalf("stats count %d of %d starts within 10 s", reqs, n)
				}
				time.Sleep(time.Millisecond)
			}
			if err := svc.Stop(); err != nil {
				rt.Fatal(err)
			}
			stopped = true
		}
		select {
		case <-svc.Quiet():
		case <-time.After(10 * time.Second):
			rt.Fatal("Quiet not closed within 10 s of every start's answer")
		}
		// Nothing more: every answer the service sent reached the server
		// (its connection flushed), and the server passed it on before
		// it answered this connection's flush.
		if err := snc.Flush(); err != nil {
			rt.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			rt.Fatal(err)
		}
		if k := len(inboxCh); k > 0 {
			m := <-inboxCh
			check(m)
			rt.Fatalf("%d more answers after every start's (the first: %s on %s)", k, m.Data, m.Subject)
		}

		b.mu.Lock()
		defer b.mu.Unlock()
		if b.maxRunning > max(bound, lanes) {
			rt.Fatalf("%d starts in their backend at once, over max(bound %d, lanes %d)", b.maxRunning, bound, lanes)
		}
		if b.maxOnLane > lanes {
			rt.Fatalf("%d starts on their lanes at once, over the %d lanes", b.maxOnLane, lanes)
		}
		if b.maxRunning > lanes {
			seen.aboveLanes++
		}
		for i, a := range answers {
			run := "r" + strconv.Itoa(i)
			byBackend := a.Header.Get("Status") != "503" || len(a.Data) != 0
			if want := map[bool]int{true: 1, false: 0}[byBackend]; b.entered[run] != want {
				rt.Fatalf("start %s reached its backend %d times, want %d (answered %s)", run, b.entered[run], want, a.Data)
			}
		}
		if len(b.quietWhileRunning) > 0 {
			rt.Fatalf("Quiet was closed while %v were in their backend", b.quietWhileRunning)
		}
	})
	// The draws, with the fixed seed, must reach what the properties are
	// about.
	if !t.Failed() && (seen.stops == 0 || seen.stopsFlushed == 0 || seen.errOnLane == 0 || seen.errReleased == 0) {
		t.Errorf("the draws missed a case: %+v", seen)
	}
}
