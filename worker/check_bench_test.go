package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// appendRun writes a run of turns turns to the log, one tool call per turn,
// decided by the aggregate; the call of the last turn is left running
// (fenced, no report). It returns the task of that attempt.
func appendRun(tb testing.TB, s *natstest.Server, run string, turns int64) api.Task {
	tb.Helper()
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := events.Limits{MaxTurns: turns + 1, MaxConcurrency: 4, ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: 60000,
		MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000, ApprovalExpiry: events.Infinite, AnswerAttempts: 2}
	var st aggregate.State
	var hd eventlog.Head
	decide := func(c aggregate.Command) {
		evs, err := aggregate.Decide(st, c, at)
		if err != nil {
			tb.Fatal(err)
		}
		envs, nh, err := s.Log.Append(ctx, run, hd, at, evs...)
		if err != nil {
			tb.Fatal(err)
		}
		hd = nh
		for _, env := range envs {
			ev, _ := env.Event()
			st = aggregate.Evolve(st, events.Recorded{Run: run, Version: env.Version, At: env.Recorded, Event: ev})
		}
	}
	decide(aggregate.Start{Run: run, Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "go", Limits: l, Runner: "r"})
	cfg := events.ToolConfig{Timeout: 60000, MaxAttempts: 1}
	for turn := int64(1); turn <= turns; turn++ {
		decide(aggregate.ModelReply{Turn: turn, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Calls: []events.ToolCall{
			{ID: "a", Name: "echo", Arguments: json.RawMessage(`{}`)}}}}})
		decide(aggregate.ResolveCalls{Turn: turn, Calls: []aggregate.Resolution{{CallID: "a", Validation: events.CallValid,
			Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Tool: cfg}}})
		if turn < turns {
			decide(aggregate.Report{Action: fmt.Sprintf("%d/a", turn), Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"ok":true}`)})
		}
	}
	return api.Task{Schema: 1, Run: run, Action: fmt.Sprintf("%d/a", turns), Agent: "a", Version: "1", Tool: "echo", Attempt: 1, Incarnation: st.Incarnation(),
		FenceVersion: fenceVersion(tb, s, run)}
}

// fenceVersion is the version of the attempt_fenced event in run's last
// message.
func fenceVersion(tb testing.TB, s *natstest.Server, run string) uint64 {
	tb.Helper()
	envs, _, err := s.Log.Last(context.Background(), run)
	if err != nil {
		tb.Fatal(err)
	}
	for _, env := range envs {
		if env.Type == events.NameAttemptFenced {
			return env.Version
		}
	}
	tb.Fatalf("run %s: no fence in the last message", run)
	return 0
}

// BenchmarkLogCheck is the worker's check that an attempt is current
// before its body starts (worker.LogCheck, the default), on runs of 3 and
// 100 turns, over TCP loopback: with the fence's version (the task a
// runner dispatches right after appending the fence) and without it (the
// whole run read and folded).
func BenchmarkLogCheck(b *testing.B) {
	for _, c := range []struct {
		turns int64
		fence bool
	}{{3, true}, {100, true}, {3, false}, {100, false}} {
		b.Run(fmt.Sprintf("turns=%d/fence_version=%v", c.turns, c.fence), func(b *testing.B) {
			turns := c.turns
			s := natstest.Start(b)
			nc := s.Connect()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			t := appendRun(b, s, "check", turns)
			if !c.fence {
				t.FenceVersion = 0
			}
			check := worker.LogCheck(js)
			ctx := context.Background()
			for b.Loop() {
				ok, err := check(ctx, t)
				if err != nil || !ok {
					b.Fatalf("check: %v %v", ok, err)
				}
			}
		})
	}
}
