package tsdktest_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/busyrunner"
	"github.com/weftrun/weft/internal/natstest"
)

// The TypeScript Client's retry rules (docs/protocol.md, "Retry rules";
// docs/typescript.md), proven as the Go client's are (api/retry_test.go,
// client/retry_test.go): the Node Client sends a command
// (sdk/typescript/test/support/client-command.js) to a real runner that
// answers runner_busy for a while (internal/busyrunner), or to a stand-in
// answering in its place.

// tsAnswer is what client-command.js printed.
type tsAnswer struct {
	Reply json.RawMessage `json:"reply"`
	Error *struct {
		Name    string         `json:"name"`
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Run     string         `json:"run"`
		Kind    string         `json:"kind"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// tsCommand sends req through the TypeScript Client's method, with the
// Client options opts, and returns what it answered.
func tsCommand(t *testing.T, url, method string, req any, opts map[string]any) tsAnswer {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on the PATH: %v", err)
	}
	script, err := filepath.Abs("../../sdk/typescript/test/support/client-command.js")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	o, err := json.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, url, method, string(b), string(o))
	cmd.Stderr = &strings.Builder{}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client-command.js: %v: %s", err, cmd.Stderr)
	}
	var a tsAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("client-command.js said %q: %v", out, err)
	}
	return a
}

// TestRetryRules_TypeScriptClientRetriesRunnerBusyWithTheSameCommandID:
// the owner of the run's partition answers runner_busy three times, then a
// real runner takes it over; the TypeScript Client sends the start again
// with the one command id it gave it and ends applied.
func TestRetryRules_TypeScriptClientRetriesRunnerBusyWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	a := tsCommand(t, d.Server.URL, "start", map[string]any{"run": "busy-ts", "agent": "notes", "input": "hello"}, nil)
	if a.Error != nil {
		t.Fatalf("start: %+v, want it applied after the retries", *a.Error)
	}
	fw := d.Forwarded()
	if len(fw) == 0 || fw[0].CommandID == "" {
		t.Fatalf("the tries carried no command id: %+v", fw)
	}
	for _, f := range fw {
		if f.CommandID != fw[0].CommandID {
			t.Fatalf("the tries carried command ids %+v, want one", fw)
		}
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-ts", fw[0].CommandID, 3)
}

// TestRetryRules_TypeScriptClientWithoutRetryReturnsRunnerBusy:
// retryWithinMs 0 sends the command once and throws runner_busy.
func TestRetryRules_TypeScriptClientWithoutRetryReturnsRunnerBusy(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	a := tsCommand(t, d.Server.URL, "start", map[string]any{"run": "busy-ts", "agent": "notes", "input": "hello"}, map[string]any{"retryWithinMs": 0})
	if a.Error == nil || a.Error.Code != "runner_busy" || a.Error.Name != "RunnerBusyError" {
		t.Fatalf("start: %+v, want RunnerBusyError", a)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// TestRetryRules_TypeScriptClientNeverRetriesAPermanentRefusal: a refusal
// whose code is not retryable (run_ended) is thrown after one try.
func TestRetryRules_TypeScriptClientNeverRetriesAPermanentRefusal(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)},
		Refusal: &weft.Error{Code: weft.CodeRunEnded, Reason: "completed", Message: "run busy-ts has finished"}})
	a := tsCommand(t, d.Server.URL, "cancel", map[string]any{"run": "busy-ts"}, nil)
	if a.Error == nil || a.Error.Code != "run_ended" {
		t.Fatalf("cancel: %+v, want run_ended", a)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// TestRetryRules_TypeScriptClientNeverRetriesOutcomeUnknown: outcome_unknown
// is thrown after one try, naming the run to read.
func TestRetryRules_TypeScriptClientNeverRetriesOutcomeUnknown(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)},
		Refusal: &weft.Error{Code: weft.CodeOutcomeUnknown, Message: "its runner did not answer in time"}})
	a := tsCommand(t, d.Server.URL, "cancel", map[string]any{"run": "unknown-ts"}, nil)
	if a.Error == nil || a.Error.Code != "outcome_unknown" || a.Error.Run != "unknown-ts" {
		t.Fatalf("cancel: %+v, want outcome_unknown naming run unknown-ts", a)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once: outcome_unknown is never retried", n)
	}
}

// TestRetryRules_TypeScriptClientRetryCutByTheCallersDeadlineIsNoAnswer: a
// try cut by the caller's signal is thrown as no answer (a TransportError
// of kind timeout), never as the first try's runner_busy, which says
// nothing was applied.
func TestRetryRules_TypeScriptClientRetryCutByTheCallersDeadlineIsNoAnswer(t *testing.T) {
	url := standIn(t, api.EndpointCancel, func(*nats.Msg) *weft.Error {
		time.Sleep(250 * time.Millisecond)
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: "busy"}
	})
	a := tsCommand(t, url, "cancel", map[string]any{"run": "r", "by": "test"}, map[string]any{"signalMs": 400})
	if a.Error == nil || a.Error.Code == "runner_busy" || a.Error.Name != "TransportError" || a.Error.Kind != "timeout" {
		t.Fatalf("cancel: %+v, want no answer (TransportError, timeout), not the earlier runner_busy", a)
	}
}

// TestRetryRules_TypeScriptClientStartRetriedStartsOneRun: a start without
// a run id whose first try was applied but answered unavailable is sent
// again; every try names the same run, which the Client chose, and the
// retry's already_started (same input) is that start: it resolves started.
func TestRetryRules_TypeScriptClientStartRetriedStartsOneRun(t *testing.T) {
	var mu sync.Mutex
	var runs []string
	url := standIn(t, api.EndpointStart, func(m *nats.Msg) *weft.Error {
		var req api.StartRequest
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		runs = append(runs, req.Run)
		n := len(runs)
		mu.Unlock()
		if n > 1 {
			same := true
			return &weft.Error{Code: weft.CodeAlreadyStarted, Message: "run exists", SameInput: &same}
		}
		return &weft.Error{Code: weft.CodeUnavailable, Message: "the append's outcome is not known"}
	})
	a := tsCommand(t, url, "start", map[string]any{"agent": "notes", "input": "pay"}, nil)
	if a.Error != nil {
		t.Fatalf("start: %+v, want started", *a.Error)
	}
	var r api.StartReply
	if err := json.Unmarshal(a.Reply, &r); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2 || runs[0] == "" || runs[0] != runs[1] || r.Run != runs[0] {
		t.Fatalf("tries named runs %q, answered %q: want two tries of one run the client chose", runs, r.Run)
	}
}

// standIn answers endpoint's requests with answer in place of a runner, on
// a server of its own whose URL it returns.
func standIn(t *testing.T, endpoint string, answer func(*nats.Msg) *weft.Error) string {
	t.Helper()
	srv := natstest.Start(t)
	sub, err := srv.Conn.Subscribe(api.SubjectPrefix+endpoint, func(m *nats.Msg) {
		if e := answer(m); e != nil {
			body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: e})
			_ = m.Respond(body)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}
