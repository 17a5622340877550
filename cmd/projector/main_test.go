package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

func TestHelpHasExamplesAndExitCodes(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, &errs)
	if !errors.Is(err, flag.ErrHelp) || exitCode(err) != exitOK {
		t.Fatalf("--help: %v (exit %d)", err, exitCode(err))
	}
	for _, want := range []string{"Usage:", "-nats string", "-rebuild", "Examples:", "projector --nats nats://127.0.0.1:4222", "Exit codes:", "2 bad command line"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, errs.String())
		}
	}
}

func TestBadCommandLineIsExit2(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--replicas", "many"}} {
		var out, errs bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, &out, &errs)
		if exitCode(err) != exitUsage {
			t.Errorf("%v: %v (exit %d), want exit %d", args, err, exitCode(err), exitUsage)
		}
	}
}

// TestProjectsUntilSIGTERM runs the projector against a real server named
// by NATS_URL, waits until the query service answers for a run in the log,
// and stops it with SIGTERM (natsnode.Run's signal handling): a clean stop
// returns no error.
func TestProjectsUntilSIGTERM(t *testing.T) {
	s := natstest.Start(t)
	ctx := context.Background()
	if _, _, err := s.Log.Append(ctx, "p-1", eventlog.Head{}, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 1", Runner: "r1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_URL": s.URL}
	var out, errs bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--replicas", "1"}, func(k string) string { return env[k] }, &out, &errs)
	}()

	q := projector.NewClient(s.Conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := q.Run(qctx, "p-1")
		cancel()
		if err == nil && v.Run == "p-1" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("projector stopped: %v\n%s", err, errs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the query service never showed run p-1: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("projector after SIGTERM: %v\n%s", err, errs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("projector did not stop on SIGTERM")
	}
}
