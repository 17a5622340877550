package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Scenario 1 with an external worker that only takes tasks
// (docs/protocol/41-tasks.md, the nats-CLI worker): the runner creates the
// durable consumer weft_task_<tool> of an external tool itself, so
// fetching from it and reporting is all a worker does.
func TestScenario01_ExternalToolConsumerCreatedByRunner(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))}, runner.WithExternalTools("pay"))
	c := ctx(t)
	cons, err := h.srv.JS.Consumer(c, api.TaskStream, deskQueue("pay").Consumer())
	if err != nil {
		t.Fatalf("consumer %s: %v", deskQueue("pay").Consumer(), err)
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "r01x", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var task api.Task
	for msg := range batch.Messages() {
		_ = msg.Ack()
		if err := json.Unmarshal(msg.Data(), &task); err != nil {
			t.Fatal(err)
		}
	}
	if task.Run != "r01x" {
		t.Fatalf("no task fetched (%v)", batch.Error())
	}
	rep := api.Report{Schema: api.Schema, CommandID: "rep", Run: task.Run, Action: task.Action, Attempt: task.Attempt, Incarnation: task.Incarnation, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"pay-1"}`)}
	if _, err := runnerReport(c, h, rep); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "r01x"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", out.Kind)
	}
}
