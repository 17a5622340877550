package main

import (
	"strings"
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/busyrunner"
)

// TestRetryRules_CLIRetriesRunnerBusyWithTheSameCommandID
// (docs/protocol.md "Retry rules"; SEMANTICS §8 "A run can always be
// answered"): the owner of the run's partition answers runner_busy three
// times, then a real runner takes it over. weft start sends the command
// again with its --command-id and ends applied; with --no-retry it answers
// runner_busy (exit 1) after one try. Before, the CLI printed the first
// runner_busy.
func TestRetryRules_CLIRetriesRunnerBusyWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	code, out, errs := cli(t, "start", "notes", "hello", "--run", "busy-cli", "--command-id", "cli-r1", "--nats", d.Server.URL)
	if code != exitOK || !strings.Contains(out, "run busy-cli:") {
		t.Fatalf("start: exit %d, %s %s; want it applied after the retries", code, out, errs)
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-cli", "cli-r1", 3)
}

func TestRetryRules_CLINoRetryAnswersRunnerBusy(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	code, out, errs := cli(t, "start", "notes", "hello", "--run", "busy-cli", "--no-retry", "--nats", d.Server.URL)
	if code != exitFailed || !strings.Contains(errs, "runner_busy") {
		t.Fatalf("start --no-retry: exit %d, %s %s; want runner_busy", code, out, errs)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}
