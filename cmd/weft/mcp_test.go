package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/busyrunner"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/tools"
)

// TestMain lets the test binary be the weft command: with WEFT_TEST_AS_WEFT
// set it runs the command line it was given (the Node client test starts
// `weft mcp serve` this way, without building another binary). With
// WEFT_TEST_REFUSED_CALLS_WAIT set too, a refused KV or stream call waits
// unanswered instead of ending the command (testRefusalsWait): a test
// kills the command there. That is not the shipped weft's path, where a
// refusal ends the command at once.
func TestMain(m *testing.M) {
	if os.Getenv("WEFT_TEST_AS_WEFT") != "" {
		if os.Getenv("WEFT_TEST_REFUSED_CALLS_WAIT") != "" {
			testRefusalsWait = true
		}
		ctx, stop := natsnode.NotifyShutdown(context.Background())
		err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		if code := exitCode(err); code != exitOK {
			fmt.Fprintln(os.Stderr, "weft:", err)
			os.Exit(code)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type slowIn struct {
	Text string `json:"text"`
}

type slowOut struct {
	ID string `json:"id"`
}

// TestNodeClientCallsWeftMCPServe: a real MCP client nobody at Weft wrote
// (the official TypeScript SDK's, installed from npm) calls `weft mcp serve`
// over stdio against a real runner. The script (internal/mcptest/node/
// serve-client.mjs) makes a keyed call whose run is still working, SIGKILLs
// the server mid-call, starts a new server and retries with the same key:
// the same run is reopened (still working, then completed, the tool body
// started exactly once); the same key with another input is key_reused;
// unkeyed calls are fresh runs; the status tool answers by run id.
func TestNodeClientCallsWeftMCPServe(t *testing.T) {
	node := mcptest.Node(t)
	mcptest.SDK(t)
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	var starts atomic.Int32
	slow := tools.Bind(tools.Define[slowIn, slowOut]("slow_note", "Writes a note, slowly."), func(ctx context.Context, _ tools.Call, _ slowIn) (slowOut, error) {
		starts.Add(1)
		if err := os.WriteFile(started, []byte("started\n"), 0o644); err != nil {
			return slowOut{}, err
		}
		for {
			if _, err := os.Stat(release); err == nil {
				return slowOut{ID: "note-1"}, nil
			}
			select {
			case <-ctx.Done():
				return slowOut{}, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewRules("notes",
		model.Rule{Name: "report", Match: func(r model.Request) bool { return len(model.Results(r)) > 0 }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("wrote "+string(model.Results(r)[0].Content))(ctx, r)
		}},
		model.Rule{Name: "slow", Match: model.InputContains("slow"), Step: model.CallTools(model.Call("slow_note", `{"text":"x"}`))},
		model.Rule{Name: "echo", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("echo: "+model.Input(r))(ctx, r)
		}},
	)
	ag, err := agent.New("notes", m, []tools.Tool{slow}, policy.AlwaysAllow(), agent.WithToolTimeout(tools.Infinity())).Build()
	if err != nil {
		t.Fatal(err)
	}
	st := mcptest.StartStack(t, ag)

	weftCmd, _ := json.Marshal([]string{os.Args[0], "--nats", st.Server.URL, "mcp", "serve", "--agent", "notes", "--principal", "node-test"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(mcptest.Dir(), "serve-client.mjs"))
	cmd.Dir = mcptest.Dir()
	cmd.Env = append(os.Environ(), "WEFT_TEST_AS_WEFT=1", "WEFT_MCP_COMMAND="+string(weftCmd), "WEFT_STARTED_FILE="+started, "WEFT_RELEASE_FILE="+release)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the Node client failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("the Node client's steps:\n%s", stdout.String())
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			steps[fmt.Sprint(line["step"])] = line
		}
	}
	if steps["done"] == nil {
		t.Fatalf("the Node client did not finish:\n%s\n%s", stdout.String(), stderr.String())
	}
	want := mcpserve.RunID("weft", "node-test", "k-node")
	if got := steps["retry-completed"]["run"]; got != want {
		t.Fatalf("the retried run is %v, want %s", got, want)
	}
	if !strings.Contains(fmt.Sprint(steps["retry-completed"]["answer"]), "note-1") {
		t.Fatalf("answer %v", steps["retry-completed"]["answer"])
	}
	v := st.Wait(t, want, func(v projections.RunView) bool { return v.Status == projections.StatusFinished })
	if v.Outcome.Kind != events.OutcomeCompleted || len(v.Actions) != 1 || v.Actions[0].Attempts != 1 {
		t.Fatalf("run %s: %+v, actions %+v", want, v.Outcome, v.Actions)
	}
	if n := starts.Load(); n != 1 {
		t.Fatalf("the tool body started %d times, want exactly 1", n)
	}
}

// TestMCPServeHTTP: `weft mcp serve --http` serves streamable HTTP; a Weft
// MCP client (package mcptools, on the Go SDK's client) lists the agent
// tool and calls it, keyed by its action's idempotency key in _meta, twice
// for one action: one run, completed both times.
func TestMCPServeHTTP(t *testing.T) {
	st := mcptest.StartStack(t, greeter(t))
	url := serveMCPHTTP(t, "--nats", st.Server.URL, "mcp", "serve", "--agent", "greeter=greet", "--service", "http-test")
	client := mcptools.New(mcptools.URL(url))
	t.Cleanup(func() { _ = client.Close() })
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	list, err := client.Tools(cctx, mcptools.Only("greet"))
	if err != nil {
		t.Fatal(err)
	}
	call := tools.Call{Run: "caller", Action: "1/call_1_1", Attempt: 1}
	want := mcpserve.RunID("http-test", "local", call.IdempotencyKey())
	for attempt := 1; attempt <= 2; attempt++ {
		call.Attempt = attempt
		r := list[0].Invoke(cctx, call, json.RawMessage(`{"input":"web"}`), tools.Settlement{})
		if r.Outcome != events.OutcomeOutput || !strings.Contains(string(r.Content), `"run":"`+want+`"`) || !strings.Contains(string(r.Content), `hello, web`) {
			t.Fatalf("attempt %d: %+v, want completed in run %s", attempt, r, want)
		}
	}
}

// greeter is an agent that answers "hello, <input>".
func greeter(t *testing.T) *agent.Agent {
	t.Helper()
	ag, err := agent.New("greeter", model.NewRules("greeter", model.Rule{Name: "greet", Match: func(model.Request) bool { return true },
		Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("hello, "+model.Input(r))(ctx, r)
		}}),
		nil, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	return ag
}

// serveMCPHTTP runs `weft <args> --http 127.0.0.1:0` (args a weft mcp serve
// command line) until the test ends and returns the URL it serves on.
func serveMCPHTTP(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append(args, "--http", "127.0.0.1:0"), io.Discard, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("weft mcp serve: %v", err)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("weft mcp serve did not say where it serves: %s", errb.String())
		}
		if _, after, ok := strings.Cut(errb.String(), "serving streamable HTTP on "); ok {
			return strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
		}
	}
}

// TestRetryRules_MCPServeRetryWithinZeroSendsOnce (docs/protocol.md "Retry
// rules", "Turning it off"): `weft mcp serve --retry-within 0` sends a
// start once, as --retry-within 0 does everywhere else: the run's owner
// answers runner_busy and is forwarded one try. Before, 0 meant the
// default bound (30 s), and the start was retried until applied.
func TestRetryRules_MCPServeRetryWithinZeroSendsOnce(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3, Projector: true})
	url := serveMCPHTTP(t, "--nats", d.Server.URL, "mcp", "serve", "--agent", "notes=note", "--wait", "5s", "--retry-within", "0")
	client := mcptools.New(mcptools.URL(url))
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := client.Tools(ctx, mcptools.Only("note"))
	if err != nil {
		t.Fatal(err)
	}
	r := list[0].Invoke(ctx, tools.Call{Run: "caller", Action: "1/call_1_1", Attempt: 1}, json.RawMessage(`{"input":"hello"}`), tools.Settlement{})
	if fw := d.Forwarded(); len(fw) != 1 {
		t.Fatalf("the start was sent %d times (%+v), want once; the call answered %s %s", len(fw), fw, r.Outcome, r.Content)
	}
}

// ask runs the docs/mcp.md example client (internal/mcptest/node/ask.mjs)
// against `weft mcp serve` on url (this test binary as weft) and returns its
// exit code and output.
func ask(t *testing.T, url string, args ...string) (int, string) {
	t.Helper()
	node := mcptest.Node(t)
	mcptest.SDK(t)
	full := append([]string{filepath.Join(mcptest.Dir(), "ask.mjs")}, args...)
	full = append(full, "--", os.Args[0], "--nats", url, "mcp", "serve", "--agent", "payment-desk", "--wait", "60s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, full...)
	cmd.Env = append(os.Environ(), "WEFT_TEST_AS_WEFT=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("ask: %v\n%s", err, out)
	}
	return 0, string(out)
}

// TestDocsMCPExample runs the runnable example of docs/mcp.md against the
// payment-desk demo: a keyed call of payment-desk waits for the approval
// (saying what to approve), `weft approve` answers it, and the same call
// again completes in the same run.
func TestDocsMCPExample(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	startDevCLI(t, "dev", "--nats", s.URL)
	run := mcpserve.RunID("weft", "local", "inv-7")
	code, out := ask(t, s.URL, "--key", "inv-7", "payment-desk", "pay invoice INV-7")
	if code != 0 {
		t.Fatalf("ask exited %d:\n%s", code, out)
	}
	t.Logf("first answer:\n%s", out)
	contains(t, "first answer", out, "Waiting for approval (run "+run+")", "calls send_payment with", "requirement finance v1, revision 1",
		"weft approve "+run+" 2/call_2_1 --revision 1 --approver NAME --credential CREDENTIAL")
	if code, out, errs := cli(t, "approve", run, "2/call_2_1", "--revision", "1", "--approver", "desk", "--credential", "alice"); code != 0 {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	code, out = ask(t, s.URL, "--key", "inv-7", "payment-desk", "pay invoice INV-7")
	if code != 0 {
		t.Fatalf("ask again exited %d:\n%s", code, out)
	}
	contains(t, "second answer", out, "Completed (run "+run+"). The answer:", `Payment result: {"id":"PAY-`, `","status":"sent"}`) // the demo gateway's id comes from the idempotency key
	if code, out = ask(t, s.URL, "--key", "inv-7", "payment-desk", "pay invoice INV-8"); code != 1 {
		t.Fatalf("same key, other input: exit %d, want 1:\n%s", code, out)
	}
	contains(t, "key_reused answer", out, "Refused: key_reused")
}
