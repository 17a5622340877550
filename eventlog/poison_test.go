package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
)

// docs/adr/0011: every reader refuses a run with a
// message it cannot fold, with a PoisonError (code quarantined) naming the
// run, the stream sequence and what is wrong — Load, Last, Head and
// WatchRun alike — and reads the run as before once Void supersedes the
// message: the head is the last event's at the record's sequence, and the
// next append from it lands and continues the chain. Void refuses a run
// that is not quarantined and a sequence that is not the offending one.
func TestEveryReaderQuarantinesAMalformedMessageUntilItIsVoided(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	env := func(run string, version uint64, name events.Name, prev, payload string) string {
		b, _ := json.Marshal(map[string]any{"schema": 1, "events": []events.Envelope{{ID: "01KB9Y5C00CLI000000000000A", Run: run, Version: version,
			Type: name, Schema: 1, Recorded: t0, Prev: prev, Payload: json.RawMessage(payload)}}})
		return string(b)
	}
	cases := []struct{ name, want string }{
		{"not JSON", "not a log message"},
		{"no schema", "message schema 0 unknown"},
		{"no events", "message without events"},
		{"another run's envelope", `names run "someone"`},
		{"unknown event", "no_such_event"},
		{"bad payload", "version 2"},
		{"version gap", "does not follow version 1"},
		{"broken chain", "does not follow version 1"},
		{"header of another run", "Weft-Run"},
		{"header count", "Weft-Events"},
		{"void record without its header", "Weft-Void"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := "q" + strconv.Itoa(i)
			h := mustAppend(t, s.Log, run, eventlog.Head{}, ev(1))
			m := nats.NewMsg(eventlog.Subject(run))
			switch c.name {
			case "not JSON":
				m.Data = []byte("<html>")
			case "no schema":
				m.Data = []byte(`{"events":[]}`)
			case "no events":
				m.Data = []byte(`{"schema":1,"events":[]}`)
			case "another run's envelope":
				m.Data = []byte(env("someone", 2, events.NameModelRequested, h.Hash, `{"turn":2,"incarnation":1}`))
			case "unknown event":
				m.Data = []byte(env(run, 2, "no_such_event", h.Hash, `{}`))
			case "bad payload":
				m.Data = []byte(env(run, 2, events.NameModelRequested, h.Hash, `{"turn":"two"}`))
			case "version gap":
				m.Data = []byte(env(run, 3, events.NameModelRequested, h.Hash, `{"turn":2,"incarnation":1}`))
			case "broken chain":
				m.Data = []byte(env(run, 2, events.NameModelRequested, strings.Repeat("0", 64), `{"turn":2,"incarnation":1}`))
			case "header of another run":
				m.Data = []byte(env(run, 2, events.NameModelRequested, h.Hash, `{"turn":2,"incarnation":1}`))
				m.Header.Set(eventlog.HeaderRun, "someone")
			case "header count":
				m.Data = []byte(env(run, 2, events.NameModelRequested, h.Hash, `{"turn":2,"incarnation":1}`))
				m.Header.Set(eventlog.HeaderCount, "3")
			case "void record without its header":
				m.Data = []byte(`{"schema":1,"void":{"seq":1,"reason":"forged"}}`)
			}
			ack, err := s.JS.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			poisoned := func(what string, err error) {
				t.Helper()
				var p *eventlog.PoisonError
				if !errors.As(err, &p) || p.Run != run || p.Seq != ack.Sequence || !strings.Contains(p.Reason, c.want) ||
					!errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) || !errors.Is(err, eventlog.ErrCorrupt) {
					t.Fatalf("%s: %v, want quarantined at %d mentioning %q", what, err, ack.Sequence, c.want)
				}
			}
			envs, head, err := s.Log.Load(ctx, run)
			poisoned("Load", err)
			if len(envs) != 1 || head != h {
				t.Fatalf("Load before the bad message: %d events, head %+v; want 1, %+v", len(envs), head, h)
			}
			_, _, err = s.Log.Last(ctx, run)
			if c.name != "version gap" && c.name != "broken chain" { // Last reads one message: it cannot see the chain
				poisoned("Last", err)
			}
			poisoned("WatchRun", s.Log.WatchRun(ctx, run, func(eventlog.RunEvent) error { return nil }))

			if _, err := s.Log.Void(ctx, run, ack.Sequence-1, "x", "t", t0); !errors.Is(err, &weft.Error{Code: weft.CodeInvalidRequest}) {
				t.Fatalf("void of another sequence: %v", err)
			}
			rec, err := s.Log.Void(ctx, run, ack.Sequence, "test", "tester", t0)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Seq != ack.Sequence || rec.Bytes != len(m.Data) || len(rec.SHA256) != 64 || rec.At <= ack.Sequence {
				t.Fatalf("void record %+v", rec)
			}
			for _, read := range []func() (eventlog.Head, error){
				func() (eventlog.Head, error) { _, h, err := s.Log.Load(ctx, run); return h, err },
				func() (eventlog.Head, error) { _, h, err := s.Log.Last(ctx, run); return h, err },
				func() (eventlog.Head, error) { return s.Log.Head(ctx, run) },
			} {
				got, err := read()
				if want := (eventlog.Head{Version: 1, Seq: rec.At, Hash: h.Hash}); err != nil || got != want {
					t.Fatalf("after the void: head %+v %v, want %+v", got, err, want)
				}
			}
			if _, err := s.Log.Void(ctx, run, ack.Sequence, "again", "t", t0); !errors.Is(err, &weft.Error{Code: weft.CodeInvalidRequest}) {
				t.Fatalf("void of a run not quarantined: %v", err)
			}
			cur, _ := s.Log.Head(ctx, run)
			mustAppend(t, s.Log, run, cur, ev(2))
			envs, _, err = s.Log.Load(ctx, run)
			if err != nil || len(envs) != 2 || envs[1].Prev != envs[0].Hash() {
				t.Fatalf("after the repair and an append: %d events, %v", len(envs), err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			n := 0
			if err := s.Log.WatchRun(wctx, run, func(e eventlog.RunEvent) error {
				if e.Envelope.Version > 0 {
					n++
				}
				if e.CaughtUp {
					return eventlog.ErrStopWatch
				}
				return nil
			}); err != nil || n != 2 {
				t.Fatalf("WatchRun after the repair: %d events, %v", n, err)
			}
		})
	}
}
