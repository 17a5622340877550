package aggregate_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
)

// Example drives a run the way a runner does: decide, append (here: stamp
// versions), evolve, then act on Pending.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s aggregate.State
	step := func(c aggregate.Command) {
		evs, err := aggregate.Decide(s, c, now)
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		for _, e := range evs {
			// A runner appends evs with eventlog.Append first, then evolves
			// with the recorded envelopes.
			s = aggregate.Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: now, Event: e})
			fmt.Println(events.Describe(e))
		}
	}
	limits := events.Limits{MaxTurns: 4, MaxConcurrency: 1, ModelTimeout: events.Infinite, ToolTimeout: 1000, MaxResultBytes: 1024, ApprovalExpiry: events.Infinite, AnswerAttempts: 1}
	step(aggregate.Start{Run: "r1", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "look up order 7", Limits: limits, Runner: "runner-a"})

	w := aggregate.Pending(s)
	step(aggregate.ModelReply{Turn: w.Model.Turn, Reply: aggregate.Reply{Kind: events.ReplyToolRequest,
		Turn: events.Message{Calls: []events.ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"order":7}`)}}}, Usage: &events.Usage{InputTokens: 3, OutputTokens: 1}}})

	w = aggregate.Pending(s)
	step(aggregate.ResolveCalls{Turn: w.Resolve.Turn, Calls: []aggregate.Resolution{{CallID: "c1", Validation: events.CallValid,
		Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Tool: events.ToolConfig{MaxAttempts: 2}}}})

	w = aggregate.Pending(s)
	d := w.Dispatch[0]
	step(aggregate.Report{Action: d.Action, Attempt: d.Attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"status":"shipped"}`)})
	fmt.Println(aggregate.Status(s).Kind, len(aggregate.Transcript(s)), "messages for turn", aggregate.Pending(s).Model.Turn)
	// Output:
	// run_started agent=desk@1 input="look up order 7" runner=runner-a limits=turns=4,concurrency=1,tokens=0,answer_attempts=1,model_timeout=infinity,retry_delay=0ms,tool_timeout=1000ms,approval_expiry=infinity,max_result_bytes=1024
	// model_requested turn=1 why=start incarnation=1
	// model_replied turn=1 kind=tool_request calls=[c1:lookup{"order":7}] usage=3+1
	// call_validated action=1/c1 tool=lookup outcome=valid
	// policy_decided action=1/c1 context=model decision=allow
	// action_queued action=1/c1 why=allowed timeout=1000ms max_attempts=2
	// attempt_fenced action=1/c1 tool=lookup attempt=1/2 incarnation=1 timeout=1000ms deadline=2026-01-01T00:00:01Z
	// attempt_reported action=1/c1 attempt=1 outcome=output content={"status":"shipped"}
	// model_requested turn=2 why=tool_results incarnation=1
	// working 3 messages for turn 2
}
