package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// The browser tests drive the console in headless Chromium: one `weft dev`
// stack (demo.Run: embedded NATS, runner, worker, projector, catalog and
// console; internal/consolestack) and one Chromium serve every test of
// this package. They are in a module of their own (e2e/ui) so that
// chromedp is not in the module graph of an application importing Weft
// (docs/adr/0038); the console's HTTP tests, on the same stacks, are in
// console/.
var (
	// stacks holds the package's stacks, each started once, when a test
	// first asks for it.
	stacks consolestack.Shared

	browserOnce sync.Once
	browserErr  error
	browserCtx  context.Context
)

// stack is a running stack; the tests of this package add their own
// readers and commands to it.
type stack struct{ *consolestack.Stack }

var (
	action     = consolestack.Action
	cardKey    = consolestack.CardKey
	weftBinary = consolestack.WeftBinary
)

func TestMain(m *testing.M) {
	code := m.Run()
	stacks.Stop()
	if browserStop != nil {
		browserStop()
	}
	// No goroutine of the console outlives its tests
	// once the shared stacks and the browser are stopped.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var browserStop func()

// devStack starts the shared stack once.
func devStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "dev", func() (*consolestack.Stack, error) { return consolestack.Dev(false) })}
}

// secureStack starts the secure stack once: `weft dev --secure
// --require-identity` (consolestack.Dev). The console and the tests
// connect as the operator.
func secureStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "secure dev", func() (*consolestack.Stack, error) { return consolestack.Dev(true) })}
}

// chromium finds the browser: $WEFT_CHROMIUM, else chromium on the PATH.
// A missing browser fails the test (CI installs it: .ci/run).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("WEFT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console's browser tests need Chromium: apt-get install chromium chromium-driver (Debian), or set WEFT_CHROMIUM to its binary")
	return ""
}

// tab opens a new browser tab at 1280×800 for one test.
func tab(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	browserOnce.Do(func() {
		profile, err := os.MkdirTemp("", "weft-console-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.UserDataDir(profile),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-extensions", true),
			chromedp.Flag("disable-default-apps", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("metrics-recording-only", true),
			chromedp.Flag("hide-scrollbars", true),
			chromedp.WindowSize(1280, 800),
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			bcancel()
			acancel()
			os.RemoveAll(profile)
			browserErr = fmt.Errorf("start %s: %w", path, err)
			return
		}
		browserCtx = bctx
		// chromedp.Cancel closes the browser gracefully, as a person
		// quitting it: Chromium removes its own temporary directory
		// (org.chromium.Chromium.*, its singleton socket's), which it
		// leaves behind when it is killed.
		browserStop = func() { chromedp.Cancel(bctx); bcancel(); acancel(); os.RemoveAll(profile) }
	})
	if browserErr != nil {
		t.Fatalf("chromium: %v", browserErr)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// do runs browser steps, failing the test with what was being done.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// typeIn focuses a field and types text into it. A live refresh replaces a
// card nobody works in (app.js mergeRegion), so the field found may be
// swapped for a fresh copy before it is focused; once focused the card is
// the viewer's and is kept.
func typeIn(sel, text string) chromedp.Action[chromedp.Void] {
	// A live refresh that replaces the field while the keys are sent
	// keeps what was typed so far and loses the rest (CI once recorded the
	// note "checki"): the field is read back, and typed again from empty
	// until it holds the whole text.
	value := fmt.Sprintf(`(document.querySelector(%q)||{}).value`, sel)
	clear := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (e) e.value = ""; return true })()`, sel)
	return again(func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for range 5 {
			if _, err := chromedp.Focus(chromedp.CSS(sel))(ctx, tg); err != nil {
				return chromedp.Void{}, fmt.Errorf("type into %s: %w", sel, err)
			}
			if _, err := chromedp.SendKeys(chromedp.CSS(sel), text)(ctx, tg); err != nil {
				return chromedp.Void{}, err
			}
			got, err := chromedp.Evaluate[string](value)(ctx, tg)
			if err != nil || got == text {
				return chromedp.Void{}, err
			}
			if _, err := chromedp.Evaluate[bool](clear)(ctx, tg); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, fmt.Errorf("type into %s: the field never held %q", sel, text)
	})
}

// again runs a step and runs it again (five tries) while it fails because
// the node it found was replaced by a live refresh before it acted on it:
// the step did nothing to the page then, so trying again is safe.
func again(step chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		var err error
		for range 5 {
			if _, err = step(ctx, tg); err == nil {
				return chromedp.Void{}, nil
			}
			if m := err.Error(); !strings.Contains(m, "Could not find node") && !strings.Contains(m, "not focusable") && !strings.Contains(m, "Could not compute box model") {
				break
			}
		}
		return chromedp.Void{}, err
	}
}

// get runs one browser action that returns a value.
//
// A read whose node the page replaced between the query and the read
// (a card re-rendered by a live update: the browser answers "No node with
// given id found") is made again, up to five times: it queries the
// selector anew and reads the node that is there now.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	for try := 1; ; try++ {
		v, err := chromedp.Run(ctx, a)
		if err != nil && try < 5 && strings.Contains(err.Error(), "No node with given id found") {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// js evaluates a JavaScript expression.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return get(t, ctx, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// waitJS waits (45 s at most) until the JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(45*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := poll(ctx, tg); err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", expr, err)
		}
		return chromedp.Void{}, nil
	}
}

// artifacts is where screenshots go: $WEFT_ARTIFACTS/console, else
// weft-artifacts/console under the user's cache directory
// (os.UserCacheDir; ~/.cache on Linux), overwritten by every run (2 MB).
// Not the temporary directory: they are kept for a person to look at
// after the run, and the test task checks the tests leave the temporary
// directory empty (internal/tmpcheck).
func artifacts(t *testing.T) string {
	t.Helper()
	base := os.Getenv("WEFT_ARTIFACTS")
	if base == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		base = filepath.Join(cache, "weft-artifacts")
	}
	dir := filepath.Join(base, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// saveShot writes a screenshot as a test artifact and, with
// WEFT_UPDATE_SCREENSHOTS=1, into docs/console/ for docs/console.md.
func saveShot(t *testing.T, name string, png []byte) {
	t.Helper()
	p := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
	if os.Getenv("WEFT_UPDATE_SCREENSHOTS") == "1" {
		docs := filepath.Join("..", "..", "..", "docs", "console")
		if err := os.MkdirAll(docs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(docs, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The family stack: an agent that delegates (docs/semantics.md §1), which the
// demo has not. OfficeAgent ("office") hands its input to the demo's
// payment desk as a sub-agent and answers with the desk's answer; host.Run
// serves both (runner, projector, query service, catalog) on their own
// embedded NATS server, and a console of its own talks to it.

// officeAgent delegates its input to the payment desk.
func officeAgent() (*agent.Agent, error) {
	desk, err := demo.Agent(nil)
	if err != nil {
		return nil, err
	}
	m := model.NewRules("office",
		model.Rule{Name: "report the desk's answer", Match: func(req model.Request) bool { _, ok := model.ResultOf(req, demo.AgentName); return ok },
			Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
				c, _ := model.ResultOf(req, demo.AgentName)
				return model.Answer("The desk says: "+string(c))(ctx, req)
			}},
		model.Rule{Name: "delegate to the desk", Match: func(model.Request) bool { return true },
			Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
				in, _ := json.Marshal(agent.DelegateInput{Input: req.Transcript[0].Text})
				return model.CallTools(model.Call(demo.AgentName, string(in)))(ctx, req)
			}},
	)
	return agent.New("office", m, []tools.Tool{agent.Delegate(desk, "The payment desk: looks invoices up and pays them.")}, policy.AlwaysAllow()).Build()
}

// familyStack starts the family stack once.
func familyStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "family", func() (*consolestack.Stack, error) {
		office, err := officeAgent()
		if err != nil {
			return nil, err
		}
		return consolestack.Hosted("family", office)
	})}
}
