package main

import (
	"context"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/busyrunner"
)

// TestRetryRules_CLIRetriesRunnerBusyWithTheSameCommandID
// (docs/protocol.md "Retry rules"; docs/semantics.md §8 "A run can always be
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

// TestRetryRules_CLIReadsTheRunAfterOutcomeUnknown (docs/protocol.md
// "Retry rules": outcome_unknown is read from the run, never guessed nor
// retried): the run's owner answers a cancel outcome_unknown. weft cancel
// sends it once — the same command id would answer it again — and prints
// what the run, read after the answer, shows now, and that only a new
// command id tries again.
func TestRetryRules_CLIReadsTheRunAfterOutcomeUnknown(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Projector: true,
		Refusal: &weft.Error{Code: weft.CodeOutcomeUnknown, Message: "run unknown-1: the command was forwarded to the run's runner ghost, which did not answer in time"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := d.Server.Log.Append(ctx, "unknown-1", eventlog.Head{}, time.Now(),
		events.RunStarted{Agent: events.AgentRef{Name: "notes", Version: "1"}, Input: "hello", Runner: busyrunner.Ghost}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "cancel", "unknown-1", "--nats", d.Server.URL)
	if code != exitNotKnown {
		t.Fatalf("cancel: exit %d, %s %s; want outcome_unknown", code, out, errs)
	}
	for _, want := range []string{"outcome_unknown", "read after this answer: run unknown-1 is working", "only with a new --command-id"} {
		if !strings.Contains(errs, want) {
			t.Errorf("cancel said %q, want it to say %q", errs, want)
		}
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once: outcome_unknown is never retried", n)
	}
}

// TestRetryRules_CLISaysANoAnswerIsNotKnown (docs/protocol.md "Retry
// rules"; nothing is reported failed when nobody knows): the run's owner
// takes the cancel and never answers. At --timeout the CLI says that
// whether the command took effect is not known, how to read the run, and
// that the same --command-id is safe to send again: outcome_unknown, exit
// 6. Before, it said only that the command API did not answer, as if
// nothing had been sent, and then unavailable (nothing applied), exit 3.
func TestRetryRules_CLISaysANoAnswerIsNotKnown(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Silent: true})
	code, out, errs := cli(t, "cancel", "silent-1", "--command-id", "cli-silent-1", "--timeout", "1s", "--no-retry", "--nats", d.Server.URL)
	if code != exitNotKnown {
		t.Fatalf("cancel: exit %d, %s %s; want %d", code, out, errs, exitNotKnown)
	}
	for _, want := range []string{"outcome_unknown", "not known", "show silent-1", "the same --command-id cli-silent-1"} {
		if !strings.Contains(errs, want) {
			t.Errorf("cancel said %q, want it to say %q", errs, want)
		}
	}
}

// TestSemantics8_CLIStartWithoutAnAnswerNamesItsRunAndCommandID
// (docs/semantics.md §8, "A run can always be answered"; docs/cli.md): the
// run's owner takes a start without --run and never answers. weft start
// says outcome_unknown (exit 6, never unavailable: the start may have been
// applied), reads the run it chose, and names the --run and --command-id
// the try carried, so that sending it again starts that run at most once.
// Before, it printed "unavailable" (nothing applied) with neither id, and
// the start run again was a second run.
func TestSemantics8_CLIStartWithoutAnAnswerNamesItsRunAndCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Silent: true, Projector: true})
	code, out, errs := cli(t, "start", "notes", "hello", "--timeout", "1s", "--no-retry", "--nats", d.Server.URL)
	if code != exitNotKnown {
		t.Fatalf("start: exit %d, %s %s; want %d", code, out, errs, exitNotKnown)
	}
	fw := d.Forwarded()
	if len(fw) != 1 || fw[0].Run == "" || fw[0].CommandID == "" {
		t.Fatalf("forwarded %+v, want one try with a run id and a command id", fw)
	}
	for _, want := range []string{"outcome_unknown", "not known", "read after this answer: run " + fw[0].Run + " is not known",
		"the same --command-id " + fw[0].CommandID + " and the same --run " + fw[0].Run} {
		if !strings.Contains(errs, want) {
			t.Errorf("start said %q, want it to say %q", errs, want)
		}
	}
}

// TestSemantics8_CLISettleWithoutAnAnswerReadsTheRun (docs/semantics.md §8;
// docs/cli.md): the run's owner takes a settlement and never answers. weft
// settle says outcome_unknown (exit 6), what the run and the action show
// now, and that the same --command-id is safe to send again. Before, it
// printed "unavailable" without either.
func TestSemantics8_CLISettleWithoutAnAnswerReadsTheRun(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Silent: true, Projector: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := d.Server.Log.Append(ctx, "settle-1", eventlog.Head{}, time.Now(),
		events.RunStarted{Agent: events.AgentRef{Name: "notes", Version: "1"}, Input: "hello", Runner: busyrunner.Ghost}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "settle", "settle-1", "a1", "--output", `{"ok":true}`, "--command-id", "cli-settle-1", "--timeout", "1s", "--no-retry", "--nats", d.Server.URL)
	if code != exitNotKnown {
		t.Fatalf("settle: exit %d, %s %s; want %d", code, out, errs, exitNotKnown)
	}
	for _, want := range []string{"outcome_unknown", "read after this answer: run settle-1 is working; it has no action a1", "the same --command-id cli-settle-1"} {
		if !strings.Contains(errs, want) {
			t.Errorf("settle said %q, want it to say %q", errs, want)
		}
	}
}
