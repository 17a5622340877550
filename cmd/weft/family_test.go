package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

// decide drives a run through the decision core as a runner would and
// returns the events it recorded.
func decide(t *testing.T, run string, cmds ...aggregate.Command) []events.Event {
	t.Helper()
	var s aggregate.State
	var out []events.Event
	for _, c := range cmds {
		evs, err := aggregate.Decide(s, c, t0)
		if err != nil {
			t.Fatalf("%s %s: %v", run, c.CommandName(), err)
		}
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: run, Version: s.Version() + 1, At: t0, Event: e})
		}
		out = append(out, evs...)
	}
	return out
}

func toolRequest(id, name string) aggregate.ModelReply {
	return aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: id, Name: name, Arguments: json.RawMessage(`{"input":"check the vendor"}`)}}}}}
}

// TestCLIShowDelegatingRun (docs/semantics.md §6, status "computed for the run
// and its children"): desk-7 delegated to a researcher whose refund waits
// for an approval. `weft show desk-7` prints the child run with its status
// and the family status (suspended, waiting for the child), since it
// differs from the run's own (working); `weft show <child>` prints the
// parent link and no family line (the child's family status is its own);
// `weft show --json` carries family_status and child_status; `weft runs`
// lists both runs as before.
func TestCLIShowDelegatingRun(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })

	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, MaxChildren: 4, MaxDepth: 1, ApprovalExpiry: 60000}
	child := aggregate.ChildRunID("desk-7", "1/a")
	appendRun(t, s.Log, "desk-7", decide(t, "desk-7",
		aggregate.Start{Run: "desk-7", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "settle vendor 7", Runner: "r", Limits: limits},
		toolRequest("a", "researcher"),
		aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "a", Validation: events.CallValid,
			Delegate: &events.AgentRef{Name: "researcher", Version: "1"}, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}},
	)...)
	appendRun(t, s.Log, child, decide(t, child,
		aggregate.Start{Run: child, Agent: events.AgentRef{Name: "researcher", Version: "1"}, Input: "check the vendor", Runner: "r", Limits: limits,
			Parent: &events.Parent{Run: "desk-7", Action: "1/a", Depth: 1, FamilyTurns: 6, MaxDepth: 1}},
		toolRequest("c", "refund"),
		aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "c", Validation: events.CallValid,
			Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "refund-review", Version: 1}}}}},
	)...)
	t.Setenv("NATS_URL", s.URL)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out, _ := cli(t, "runs")
		if strings.Contains(out, "desk-7") && strings.Contains(out, "suspended") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs never listed:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, out, errs := cli(t, "show", "desk-7")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	contains(t, "show parent", out, "status     working\n", "family     suspended, waiting for child run "+child+"\n",
		"child runs:", "1/a", child, "researcher@1", "suspended",
		"waiting for child run "+child+" (suspended)\n  show: weft show "+child)
	if strings.Contains(out, "parent ") {
		t.Fatalf("a root run shows a parent:\n%s", out)
	}

	code, out, errs = cli(t, "show", child)
	if code != 0 {
		t.Fatalf("show child: %d %s", code, errs)
	}
	contains(t, "show child", out, "parent     desk-7 (action 1/a, depth 1)\n", "status     suspended\n", "weft approve "+child+" 1/c")
	if strings.Contains(out, "family ") || strings.Contains(out, "child runs:") {
		t.Fatalf("the child shows a family line or children:\n%s", out)
	}

	_, out, _ = cli(t, "show", "desk-7", "--json")
	var shown struct {
		Run          string `json:"run"`
		Status       string `json:"status"`
		FamilyStatus struct {
			Status  string   `json:"status"`
			Waiting []string `json:"waiting"`
		} `json:"family_status"`
		ChildStatus []projector.ChildStatus `json:"child_status"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	if shown.Run != "desk-7" || shown.Status != "working" || shown.FamilyStatus.Status != "suspended" || len(shown.FamilyStatus.Waiting) != 1 ||
		len(shown.ChildStatus) != 1 || shown.ChildStatus[0].Status != "suspended" {
		t.Fatalf("show --json: %+v", shown)
	}

	_, out, _ = cli(t, "runs")
	contains(t, "runs", out, "RUN", "STATUS", "desk-7", "working", child, "suspended")
}
