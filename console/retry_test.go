package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/busyrunner"
)

// startForm posts the start form of a console on d (with opts) and
// returns its JSON answer.
func startForm(t *testing.T, d *busyrunner.Deployment, run, commandID string, opts ...console.Option) (ok bool, code string) {
	t.Helper()
	form := url.Values{"agent": {"notes"}, "input": {"hello"}, "run": {run}, "command_id": {commandID}, "return": {"/"}}
	_, b := postForm(t, d, "/act/start", form, true, opts...)
	var ans struct {
		OK   bool   `json:"ok"`
		Code string `json:"code"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return ans.OK, ans.Code
}

// TestRetryRules_ConsoleRetriesRunnerBusyWithTheSameCommandID
// (docs/protocol.md "Retry rules"; docs/semantics.md §8 "A run can always be
// answered"): the owner of the run's partition answers runner_busy three
// times, then a real runner takes it over. The console's start form is
// sent again with the form's command id and answers started; with
// WithRetry(0) it answers runner_busy after one try. Before, the console
// showed the first runner_busy.
func TestRetryRules_ConsoleRetriesRunnerBusyWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	if ok, code := startForm(t, d, "busy-con", "console-r1"); !ok {
		t.Fatalf("the start form answered %s, want started after the retries", code)
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-con", "console-r1", 3)
}

func TestRetryRules_ConsoleWithoutRetryAnswersRunnerBusy(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	if ok, code := startForm(t, d, "busy-con", "console-r2", console.WithRetry(0)); ok || code != "runner_busy" {
		t.Fatalf("the start form answered ok=%v %s, want runner_busy", ok, code)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// postForm posts form to path on a console on d (with opts) and returns
// the HTTP status and body; asJSON asks for the script's JSON answer.
func postForm(t *testing.T, d *busyrunner.Deployment, path string, form url.Values, asJSON bool, opts ...console.Option) (int, []byte) {
	t.Helper()
	c, err := console.New(d.Server.Conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// unknownAnswer is the JSON answer's part these tests read.
type unknownAnswer struct {
	OK            bool   `json:"ok"`
	Code          string `json:"code"`
	Message       string `json:"message"`
	Unknown       bool   `json:"unknown"`
	Run           string `json:"run"`
	Link          string `json:"link"`
	NextCommandID string `json:"next_command_id"`
}

// TestSemantics8_ConsoleSaysANoAnswerIsNotKnownAndKeepsTheCommandID
// (docs/semantics.md §8, "A run can always be answered"; docs/protocol.md
// "Retry rules"): the run's owner takes the start and never answers. The
// console's start form, without a run id, answers "not known" — not a
// refusal — names the run id the console chose (the form keeps it) and
// gives no new command id, so that pressing Start again sends the same
// command for the same run, applied at most once. Before, it answered
// "unavailable" (nothing applied) with a new command id: a second press
// started a second run.
func TestSemantics8_ConsoleSaysANoAnswerIsNotKnownAndKeepsTheCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Silent: true, Projector: true})
	form := url.Values{"agent": {"notes"}, "input": {"hello"}, "run": {""}, "command_id": {"console-silent-1"}, "return": {"/runs"}}
	_, b := postForm(t, d, "/act/start", form, true, console.WithTimeout(time.Second), console.WithRetry(0))
	var ans unknownAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	if ans.OK || !ans.Unknown || ans.Code != "" || ans.NextCommandID != "" {
		t.Fatalf("the start form answered %s, want not known (no code, no next command id)", b)
	}
	fw := d.Forwarded()
	if len(fw) != 1 || fw[0].CommandID != "console-silent-1" || fw[0].Run == "" || fw[0].Run != ans.Run {
		t.Fatalf("forwarded %+v; the answer names run %q: want one try of console-silent-1 for the run the answer names", fw, ans.Run)
	}
	for _, want := range []string{"not known", "Read now: run " + ans.Run + " is not known"} {
		if !strings.Contains(ans.Message, want) {
			t.Errorf("the answer says %q, want it to say %q", ans.Message, want)
		}
	}
	// Without the script, the page says the same, and shows the start form
	// again as it was sent: its command id, the run id and the input.
	form.Set("run", ans.Run)
	_, page := postForm(t, d, "/act/start", form, false, console.WithTimeout(time.Second), console.WithRetry(0))
	for _, want := range []string{"<strong>Not known.</strong>", `name="command_id" value="console-silent-1"`, `name="run" value="` + ans.Run + `"`, `name="input" value="hello"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page after the form has no %s:\n%s", want, page)
		}
	}
	if strings.Contains(string(page), "Refused") {
		t.Errorf("the page after the form says Refused:\n%s", page)
	}
}

// TestSemantics8_ConsoleReadsTheRunAfterOutcomeUnknown (docs/semantics.md §8;
// docs/protocol.md "Retry rules": outcome_unknown is read from the run,
// never guessed): the run's owner answers a cancel outcome_unknown. The
// console's cancel form answers "not known" with the code, what the run
// shows now, and keeps its command id. Before, it showed "Refused:
// outcome_unknown" with a new command id.
func TestSemantics8_ConsoleReadsTheRunAfterOutcomeUnknown(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Projector: true,
		Refusal: &weft.Error{Code: weft.CodeOutcomeUnknown, Message: "run unknown-c: the command was forwarded to the run's runner ghost, which did not answer in time"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := d.Server.Log.Append(ctx, "unknown-c", eventlog.Head{}, time.Now(),
		events.RunStarted{Agent: events.AgentRef{Name: "notes", Version: "1"}, Input: "hello", Runner: busyrunner.Ghost}); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"run": {"unknown-c"}, "reason": {"test"}, "command_id": {"console-unknown-1"}, "return": {"/runs/unknown-c"}}
	_, b := postForm(t, d, "/act/cancel", form, true)
	var ans unknownAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	if ans.OK || !ans.Unknown || ans.Code != "outcome_unknown" || ans.NextCommandID != "" || ans.Link != "/runs/unknown-c" {
		t.Fatalf("the cancel form answered %s, want not known (outcome_unknown, a link to the run, no next command id)", b)
	}
	if want := "Read now: run unknown-c is working"; !strings.Contains(ans.Message, want) {
		t.Errorf("the answer says %q, want it to say %q", ans.Message, want)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once: outcome_unknown is never retried", n)
	}
}
