package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/model/openai/openaitest"
)

var devURL = regexp.MustCompile(`Weft dev is running: (?:embedded|external) NATS at (nats://[^,\s]+),`)

// startDevCLI runs `weft args...` (a dev command line) in the test's
// process until the test ends, waits until it says it is running and
// returns its output and the NATS URL it printed.
func startDevCLI(t *testing.T, args ...string) (*syncbuf.Buffer, string) {
	t.Helper()
	out, errs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, out, errs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("weft dev: %v\n%s", err, errs)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := devURL.FindStringSubmatch(out.String()); m != nil {
			return out, m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("weft dev stopped: %v\n%s%s", err, out, errs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft dev never said it runs:\n%s%s", out, errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDevUsesWEFTMODEL: with WEFT_MODEL set, weft dev opens that model
// (here an OpenAI adapter pointed at a fake Chat Completions server), says
// so on startup, and runs the payment desk on it; WEFT_DATA is the embedded
// server's store.
func TestDevUsesWEFTMODEL(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text("Nothing to pay today."))
	data := t.TempDir()
	t.Setenv("WEFT_MODEL", "openai:gpt-fake")
	t.Setenv("WEFT_MODEL_BASE_URL", srv.BaseURL())
	t.Setenv("WEFT_MODEL_API_KEY", "test-key")
	t.Setenv("WEFT_DATA", data)
	t.Setenv("NATS_URL", "")

	out, url := startDevCLI(t, "dev", "--listen", "0")
	want := "Model: openai:gpt-fake (Chat Completions at " + srv.BaseURL() + "), from WEFT_MODEL=openai:gpt-fake."
	if !strings.Contains(out.String(), want) {
		t.Fatalf("startup does not say %q:\n%s", want, out)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) == 0 {
		t.Fatalf("WEFT_DATA %s holds no store: %v %v", data, entries, err)
	}

	t.Setenv("NATS_URL", url)
	if code, o, errs := cli(t, "start", "payment-desk", "anything to pay?", "--run", "real-1"); code != 0 {
		t.Fatalf("start: %d %s %s", code, o, errs)
	}
	show := waitShow(t, "real-1", "finished: completed")
	if !strings.Contains(show, "Nothing to pay today.") {
		t.Fatalf("the answer is not the fake model's:\n%s", show)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the fake server got %d requests, want 1", len(reqs))
	}
	req, err := openaitest.Decode(reqs[0])
	if err != nil || req.Model != "gpt-fake" {
		t.Fatalf("request model %q (%v), want gpt-fake", req.Model, err)
	}
}

// TestDevSaysScriptedModel: without WEFT_MODEL or --model, weft dev runs
// the scripted model and says so, naming the variable that changes it.
func TestDevSaysScriptedModel(t *testing.T) {
	t.Setenv("WEFT_MODEL", "")
	t.Setenv("NATS_URL", "")
	out, _ := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
	if !strings.Contains(out.String(), "Model: scripted:payment-desk, the demo's scripted model (WEFT_MODEL or --model selects a real one") {
		t.Fatalf("startup does not name the scripted model:\n%s", out)
	}
}

// TestDevBadModelIsUsageError: a malformed model spec, from the environment
// or the flag, is a bad command line (exit 2) that names where it came
// from, before anything starts.
func TestDevBadModelIsUsageError(t *testing.T) {
	t.Setenv("NATS_URL", "")
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"WEFT_MODEL": "gpt-4.1"}, nil, `WEFT_MODEL=gpt-4.1: provider: model spec "gpt-4.1": want openai:<model> or anthropic:<model>`},
		{map[string]string{"WEFT_MODEL": "mistral:large"}, nil, `unknown provider "mistral"`},
		{map[string]string{"WEFT_MODEL": "openai:gpt-4.1"}, []string{"--model", "nope"}, `--model nope: provider: model spec "nope"`},
		{map[string]string{"WEFT_MODEL": "anthropic:claude", "WEFT_MODEL_MAX_TOKENS": "lots"}, nil, `WEFT_MODEL_MAX_TOKENS="lots"`},
		{map[string]string{"WEFT_MODEL": "openai:gpt-4.1", "WEFT_MODEL_THINKING_BUDGET": "1024"}, nil, `thinking budget applies to anthropic models only`},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, out, errs := cli(t, append([]string{"dev", "--listen", "0", "--data", t.TempDir()}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.want) || strings.Contains(out, "Weft dev is running") {
			t.Errorf("%v %v: exit %d, want %d with %q:\n%s%s", c.env, c.args, code, exitUsage, c.want, out, errs)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}

// TestDevBadTelemetryIsUsageError: an unknown WEFT_OTEL exporter is a bad
// command line (exit 2) before anything starts, never a silently disabled
// trace.
func TestDevBadTelemetryIsUsageError(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	t.Setenv("WEFT_OTEL", "jaeger")
	code, out, errs := cli(t, "dev", "--listen", "0", "--data", t.TempDir())
	if code != exitUsage || !strings.Contains(errs, `WEFT_OTEL="jaeger"`) || strings.Contains(out, "Weft dev is running") {
		t.Errorf("exit %d, want %d naming WEFT_OTEL:\n%s%s", code, exitUsage, out, errs)
	}
}
