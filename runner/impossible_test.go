package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8: one malformed message must not stop
// the world, even one every log check accepts. A well-formed message that
// continues a suspended run's hash chain but names an impossible
// transition (a report for an action that does not exist) lands on its
// subject. The runner does not crash folding it: the cancel that loads the
// run is answered quarantined, naming the run, the version and the event,
// a second command is answered the same, and another run is served.
func TestAnImpossibleEventQuarantinesItsRunAndStopsNothingElse(t *testing.T) {
	t.Parallel()
	desk := func() *agent.Agent {
		m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
		return build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove))
	}
	h := one(t, desk(), "rx", "x")
	h.waitStatus("rx", aggregate.StatusSuspended)
	c := ctx(t)

	envs, _, err := h.srv.Log.Load(c, "rx")
	if err != nil {
		t.Fatal(err)
	}
	last := envs[len(envs)-1]
	bad, err := events.Encode(events.AttemptReported{Action: "9/nope", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	bad.ID, bad.Run, bad.Version, bad.Recorded, bad.Prev = "01JZZZZZZZZZZZZZZZZZZZZZZZ", "rx", last.Version+1, time.Now().UTC(), last.Hash()
	body, err := json.Marshal(map[string]any{"schema": eventlog.MessageSchema, "events": []events.Envelope{bad}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.JS.Publish(c, eventlog.Subject("rx"), body); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.srv.Log.Load(c, "rx"); err != nil {
		t.Fatalf("the log's own checks refuse the message (%v): the test needs one they accept", err)
	}

	for i, id := range []string{"c1", "c2"} {
		_, err := h.client.Cancel(c, api.CancelRequest{CommandID: id, Run: "rx"})
		if !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
			t.Fatalf("cancel %d of the run with an impossible event: %v, want quarantined", i+1, err)
		}
		for _, want := range []string{"rx", "attempt_reported", "9/nope"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("answer %q does not name %q", err, want)
			}
		}
	}
	// A second runner starting now (its driver-key rebuild and recovery
	// scan read the run) does not crash either.
	h.startRunner([]*agent.Agent{desk()})
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c3", Run: "rx"}); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
		t.Fatalf("cancel after a second runner started: %v, want quarantined", err)
	}
	// The runners are alive and serve another run.
	if _, err := h.client.Start(c, api.StartRequest{Run: "rok", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if st := h.waitStatus("rok", aggregate.StatusSuspended); !st.Exists() {
		t.Fatal("the healthy run does not exist")
	}
}
