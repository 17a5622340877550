package api_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
)

// laneBackend's Start waits for its run's gate in before, when the run
// has one (on its lane: admitted, not released), releases its lane
// (api.ReleaseLane) and then waits for its run's gate in gates, when the
// run has one; every other command is slowBackend's.
type laneBackend struct {
	slowBackend
	before   map[string]chan struct{}
	gates    map[string]chan struct{}
	admitted chan string
	released chan string
	refuse   map[string]*weft.Error // answered after the release
}

func (b *laneBackend) Start(ctx context.Context, req api.StartRequest) (api.StartReply, error) {
	if g := b.before[req.Run]; g != nil {
		b.admitted <- req.Run
		select {
		case <-g:
		case <-ctx.Done():
			return api.StartReply{}, ctx.Err()
		}
	}
	api.ReleaseLane(ctx)
	b.released <- req.Run
	if e := b.refuse[req.Run]; e != nil {
		return api.StartReply{}, e
	}
	if g := b.gates[req.Run]; g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return api.StartReply{}, ctx.Err()
		}
	}
	return api.StartReply{Schema: api.Schema, Run: req.Run, Status: "working"}, nil
}

// startOn sends run's start to the start endpoint with its reply to
// inbox (an inbox subscription counts the answers).
func startOn(t *testing.T, nc *nats.Conn, inbox, run string) {
	t.Helper()
	body, _ := json.Marshal(api.StartRequest{Schema: api.Schema, Run: run, Agent: "desk", Input: "x"})
	if err := nc.PublishRequest("weft.api.start", inbox, body); err != nil {
		t.Fatal(err)
	}
}

// Commands are answered (docs/semantics.md §8, "A run can always be
// answered"): a start that released its lane once its decision was queued
// for the append (api.ReleaseLane) is answered exactly once, when its
// backend returns — and its one lane takes the next start meanwhile; at
// the bound of starts in flight (api.WithStartsInFlight) the lane waits
// for one to be answered, as a lane that holds its request does. Without
// the release a second start on a runner with one lane waits for the
// first one's answer.
func TestSemantics8_AStartThatReleasedItsLaneIsAnsweredOnceAndTheLaneServesTheNext(t *testing.T) {
	for _, bound := range []int{2, 1} {
		srv := natstest.Start(t)
		b := &laneBackend{gates: map[string]chan struct{}{"held": make(chan struct{})}, released: make(chan string, 4)}
		svc, err := api.Serve(srv.Conn, b, nil, "0.0.0", api.WithLanes(1), api.WithStartsInFlight(bound))
		if err != nil {
			t.Fatal(err)
		}
		nc := srv.Connect()
		inbox := nc.NewRespInbox()
		answers := make(chan *nats.Msg, 8)
		sub, err := nc.ChanSubscribe(inbox, answers)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		startOn(t, nc, inbox, "held")
		if got := <-b.released; got != "held" {
			t.Fatalf("bound %d: released %q first, want held", bound, got)
		}
		startOn(t, nc, inbox, "next")
		answered := func(want string) {
			t.Helper()
			select {
			case m := <-answers:
				var rep api.StartReply
				if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Run != want || m.Header.Get("Nats-Service-Error") != "" {
					t.Fatalf("bound %d: answer %s (%v, headers %v), want %s's success", bound, m.Data, err, m.Header, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("bound %d: no answer for %s within 10 s", bound, want)
			}
		}
		if bound == 2 {
			// The lane was released: the next start is served and answered
			// while the first one still waits.
			answered("next")
			close(b.gates["held"])
			answered("held")
		} else {
			// At the bound the lane waits: the next start is not taken
			// until the held one is answered.
			select {
			case got := <-b.released:
				t.Fatalf("bound 1: %s was taken while the held start was in flight", got)
			case <-time.After(300 * time.Millisecond):
			}
			close(b.gates["held"])
			answered("held")
			answered("next")
		}
		// Exactly once: no further answer arrives.
		if err := svc.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-answers:
			t.Fatalf("bound %d: a second answer: %s", bound, m.Data)
		case <-time.After(200 * time.Millisecond):
		}
		_ = sub.Unsubscribe()
	}
}

// Commands are answered (docs/semantics.md §8, "A run can always be
// answered"), and a stopping runner's drain is bounded by its window
// (docs/semantics.md, graceful drain): the service's Stop returns at once
// — as micro's does — without waiting for the starts in flight, one off
// its lane (released) and one still on it (admitted, not released); each
// of them is answered exactly once when its backend returns, after Stop,
// and Quiet is closed only then. The runner waits for Quiet within its
// drain window and then ends the starts still in flight, which answers
// them with an error (runner.Run): a stop never leaves a start
// unanswered.
func TestSemantics8_StopDuringStartsInFlightReturnsAndEachIsAnsweredOnce(t *testing.T) {
	srv := natstest.Start(t)
	b := &laneBackend{
		before:   map[string]chan struct{}{"on-lane": make(chan struct{})},
		gates:    map[string]chan struct{}{"off-lane": make(chan struct{})},
		admitted: make(chan string, 4),
		released: make(chan string, 4),
	}
	svc, err := api.Serve(srv.Conn, b, nil, "0.0.0", api.WithLanes(1))
	if err != nil {
		t.Fatal(err)
	}
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(b.before["on-lane"])
			close(b.gates["off-lane"])
		}
	}
	defer open()
	nc := srv.Connect()
	inbox := nc.NewRespInbox()
	answers := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	startOn(t, nc, inbox, "off-lane")
	if got := <-b.released; got != "off-lane" {
		t.Fatalf("released %q first, want off-lane", got)
	}
	startOn(t, nc, inbox, "on-lane")
	if got := <-b.admitted; got != "on-lane" {
		t.Fatalf("admitted %q, want on-lane", got)
	}
	select {
	case <-svc.Quiet():
		t.Fatal("Quiet closed with two starts in flight")
	default:
	}
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for the starts in flight (not returned within 10 s with both held)")
	}
	select {
	case m := <-answers:
		t.Fatalf("an answer before the starts' backends returned: %s", m.Data)
	case <-svc.Quiet():
		t.Fatal("Quiet closed with two starts in flight after Stop")
	default:
	}
	open()
	got := map[string]int{}
	for range 2 {
		select {
		case m := <-answers:
			var rep api.StartReply
			if err := json.Unmarshal(m.Data, &rep); err != nil || m.Header.Get("Nats-Service-Error") != "" {
				t.Fatalf("answer %s (%v, headers %v), want a success", m.Data, err, m.Header)
			}
			got[rep.Run]++
		case <-time.After(10 * time.Second):
			t.Fatalf("answers %v after Stop, want on-lane and off-lane once each", got)
		}
	}
	if got["on-lane"] != 1 || got["off-lane"] != 1 {
		t.Fatalf("answers %v, want on-lane and off-lane once each", got)
	}
	select {
	case <-svc.Quiet():
	case <-time.After(10 * time.Second):
		t.Fatal("Quiet not closed once both starts were answered")
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-answers:
		t.Fatalf("a second answer: %s", m.Data)
	case <-time.After(200 * time.Millisecond):
	}
}

// Bad input gets a clear error with a stable code (docs/semantics.md §6:
// a start whose append finds the run started by another is refused
// already_started): an error given after the start released its lane is
// answered as one given on it — micro's error headers (the weft code and
// its status) and the ErrorReply body — though it goes to the reply
// subject directly (docs/protocol/40-commands.md: not in the stats).
func TestSemantics6_AnErrorAfterTheLaneReleaseIsAnsweredWithTheErrorHeaders(t *testing.T) {
	srv := natstest.Start(t)
	b := &laneBackend{
		released: make(chan string, 1),
		refuse:   map[string]*weft.Error{"taken": {Code: weft.CodeAlreadyStarted, Message: "run taken is already started"}},
	}
	svc, err := api.Serve(srv.Conn, b, nil, "0.0.0", api.WithLanes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	body, _ := json.Marshal(api.StartRequest{Schema: api.Schema, Run: "taken", Agent: "desk", Input: "x"})
	m, err := srv.Connect().Request("weft.api.start", body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-b.released; got != "taken" {
		t.Fatalf("released %q, want taken", got)
	}
	var rep api.ErrorReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != weft.CodeAlreadyStarted || rep.Error.Message != "run taken is already started" {
		t.Fatalf("body %s (%v), want the already_started ErrorReply", m.Data, err)
	}
	if c, code := m.Header.Get("Nats-Service-Error"), m.Header.Get("Nats-Service-Error-Code"); c != string(weft.CodeAlreadyStarted) || code != "409" {
		t.Fatalf("headers %v, want Nats-Service-Error already_started and Nats-Service-Error-Code 409", m.Header)
	}
}
