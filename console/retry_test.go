package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/internal/busyrunner"
)

// startForm posts the start form of a console on d (with opts) and
// returns its JSON answer.
func startForm(t *testing.T, d *busyrunner.Deployment, run, commandID string, opts ...console.Option) (ok bool, code string) {
	t.Helper()
	c, err := console.New(d.Server.Conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	form := url.Values{"agent": {"notes"}, "input": {"hello"}, "run": {run}, "command_id": {commandID}, "return": {"/"}}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/act/start", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
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
// (docs/protocol.md "Retry rules"; SEMANTICS §8 "A run can always be
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
