package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/tools"
)

// One `weft dev` stack (demo.Run: embedded NATS, runner, worker, projector,
// catalog and console) and one Chromium serve every test of this package.
var (
	stackOnce sync.Once
	stackErr  error
	shared    *stack

	browserOnce sync.Once
	browserErr  error
	browserCtx  context.Context
)

type stack struct {
	consoleURL string
	nc         *nats.Conn
	cmd        *api.Client
	query      *projector.Client
	stop       func()
	dir        string
	// roles is the secure stack's roles directory (credentials, the
	// approver's signing key).
	roles string
	// natsURL is the dev stacks' NATS URL.
	natsURL string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	if secure != nil {
		secure.stop()
	}
	if family != nil {
		family.stop()
	}
	if narrow != nil {
		narrow.stop()
	}
	if amounts != nil {
		amounts.stop()
	}
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
	stackOnce.Do(func() { shared, stackErr = startDev(false) })
	if stackErr != nil {
		t.Fatalf("dev stack: %v", stackErr)
	}
	return shared
}

// The secure stack: `weft dev --secure --require-identity` (demo.Run with
// Secure and RequireIdentity), whose agent's only approver takes signed
// proofs by the key in <roles>/approver.nk, which is also its one person
// key: every person's command must carry a proof signed with it and a
// reason (identity_required). The console and the tests connect as the
// operator.
var (
	secureOnce sync.Once
	secureErr  error
	secure     *stack
)

// secureStack starts the secure stack once.
func secureStack(t *testing.T) *stack {
	t.Helper()
	secureOnce.Do(func() { secure, secureErr = startDev(true) })
	if secureErr != nil {
		t.Fatalf("secure dev stack: %v", secureErr)
	}
	return secure
}

// startDev runs demo.Run (weft dev), with roles when secure, and connects
// to it (as the operator when secure).
func startDev(secured bool) (*stack, error) {
	dir, err := os.MkdirTemp("", "weft-console-test-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*stack, error) { cancel(); os.RemoveAll(dir); return nil, err }
	natsURL, consoleURL := make(chan string, 1), make(chan string, 1)
	done := make(chan error, 1)
	roleDir := filepath.Join(dir, "roles")
	go func() {
		done <- demo.Run(ctx, demo.Options{DataDir: dir, Listen: "0", Console: "127.0.0.1:0", Secure: secured, SecureDir: roleDir, RequireIdentity: secured,
			Ready: func(u string) { natsURL <- u }, ConsoleReady: func(u string) { consoleURL <- u }})
	}()
	s := &stack{dir: dir, roles: roleDir}
	select {
	case s.consoleURL = <-consoleURL:
	case err := <-done:
		return fail(fmt.Errorf("demo.Run: %v", err))
	case <-time.After(120 * time.Second):
		return fail(errors.New("weft dev did not start the console within 120 s"))
	}
	var u string
	select {
	case u = <-natsURL:
	case err := <-done:
		return fail(fmt.Errorf("demo.Run: %v", err))
	}
	opts := []natsnode.Option{natsnode.WithURL(u)}
	if secured {
		opts = append(opts, natsnode.WithCredsFile(filepath.Join(roleDir, roles.CredsFile(roles.Operator, api.Queue{}))))
	}
	node, err := natsnode.Start(ctx, opts...)
	if err != nil {
		cancel()
		<-done
		os.RemoveAll(dir)
		return nil, err
	}
	nc := node.Conn()
	s.nc, s.cmd, s.query, s.natsURL = nc, api.NewClient(nc), projector.NewClient(nc), u
	s.stop = func() {
		_ = node.Close(context.Background())
		cancel()
		<-done
		os.RemoveAll(dir)
	}
	return s, nil
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
			browserErr = fmt.Errorf("start %s: %w", path, err)
			return
		}
		browserCtx = bctx
		browserStop = func() { bcancel(); acancel(); os.RemoveAll(profile) }
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

// start starts a demo run and waits until it has status want.
func (s *stack) start(t *testing.T, run, input, want string) projections.RunView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.cmd.Start(ctx, api.StartRequest{Run: run, Agent: demo.AgentName, Input: input}); err != nil {
		t.Fatalf("start %s: %v", run, err)
	}
	return s.waitStatus(t, run, want)
}

// waitStatus waits (45 s at most) until the run view has the status and
// the projector has stored it (the query answers a view folded to the log's
// head before that; the pages' lists, inboxes and audit panel read what
// the projector stored).
func (s *stack) waitStatus(t *testing.T, run, want string) projections.RunView {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last projections.RunView
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rep, err := s.query.RunFamily(ctx, run)
		cancel()
		if err == nil {
			v := rep.View
			last = v
			if v.Status == want && rep.Projected == v.Version {
				return v
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("run %s never reached %s (last status %q)", run, want, last.Status)
	return last
}

// historyAll returns the run's whole history (one page: the tests' runs
// are short).
func (s *stack) historyAll(t *testing.T, run string) []events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := s.query.History(ctx, projector.HistoryRequest{Run: run, Limit: projector.MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	return h.Events
}

// history returns the run's events of one type.
func (s *stack) history(t *testing.T, run string, name events.Name) []events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := s.query.History(ctx, projector.HistoryRequest{Run: run, Limit: projector.MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Envelope
	for _, e := range h.Events {
		if e.Type == name {
			out = append(out, e)
		}
	}
	return out
}

// cardKey is the DOM id of an inbox card (console's key rule for run ids
// and action ids of [A-Za-z0-9_-] and "/").
func cardKey(kind, run, action string) string {
	return kind + "-" + strings.ReplaceAll(run+"/"+action, "/", "_2f")
}

// artifacts is where screenshots go: $WEFT_ARTIFACTS/console, else
// <temp>/weft-artifacts/console (overwritten by every run).
func artifacts(t *testing.T) string {
	t.Helper()
	base := os.Getenv("WEFT_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "weft-artifacts")
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
		docs := filepath.Join("..", "docs", "console")
		if err := os.MkdirAll(docs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(docs, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// get fetches a console page without a browser.
func (s *stack) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.consoleURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The family stack: an agent that delegates (docs/semantics.md §1), which the
// demo has not. OfficeAgent ("office") hands its input to the demo's
// payment desk as a sub-agent and answers with the desk's answer; host.Run
// serves both (runner, projector, query service, catalog) on their own
// embedded NATS server, and a console of its own talks to it.
var (
	familyOnce sync.Once
	familyErr  error
	family     *stack
)

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
	familyOnce.Do(func() {
		office, err := officeAgent()
		if err != nil {
			familyErr = err
			return
		}
		family, familyErr = hostedStack("family", office)
	})
	if familyErr != nil {
		t.Fatalf("family stack: %v", familyErr)
	}
	return family
}

// hostedStack serves agents with host.Run (runner, projector, query
// service, catalog) on an embedded NATS server of their own, and a console
// of its own that talks to it.
func hostedStack(name string, agents ...*agent.Agent) (*stack, error) {
	dir, err := os.MkdirTemp("", "weft-console-"+name+"-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*stack, error) { cancel(); os.RemoveAll(dir); return nil, err }
	node, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		return fail(err)
	}
	ready := make(chan struct{})
	hostDone := make(chan error, 1)
	go func() {
		hostDone <- host.Run(ctx, node.Conn(), node.JetStream(), agents, host.WithReady(func() { close(ready) }))
	}()
	select {
	case <-ready:
	case err := <-hostDone:
		node.Close(context.Background())
		return fail(fmt.Errorf("host.Run: %v", err))
	case <-time.After(120 * time.Second):
		node.Close(context.Background())
		return fail(errors.New("host.Run was not ready within 120 s"))
	}
	con, err := console.New(node.Conn(), console.WithApprover(demo.Approver))
	if err != nil {
		node.Close(context.Background())
		return fail(err)
	}
	ln, u, err := console.Listen("127.0.0.1:0")
	if err != nil {
		node.Close(context.Background())
		return fail(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- con.Serve(ctx, ln) }()
	nc := node.Conn()
	s := &stack{consoleURL: u, nc: nc, cmd: api.NewClient(nc), query: projector.NewClient(nc), dir: dir}
	s.stop = func() {
		cancel()
		<-serveDone
		<-hostDone
		node.Close(context.Background())
		os.RemoveAll(dir)
	}
	return s, nil
}

// approverKey returns the secure stack's approver signing key (the key in
// <roles>/approver.nk) and its public key.
func (s *stack) approverKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(s.roles, demo.ApproverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(raw))))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}
