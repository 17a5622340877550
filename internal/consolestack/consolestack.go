// Package consolestack starts, for tests, the stacks the console's tests
// drive from outside — `weft dev` (demo.Run), plain or secure, and agents
// served by host.Run with a console of their own — and reads runs back from
// them. The console's HTTP tests (console/) and its browser tests
// (e2e/ui/console, a module of their own so that chromedp is not in the
// module graph of an application importing Weft: docs/adr/0038) share it.
package consolestack

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/roles"
)

// Stack is one running stack with a console, and a connection to it.
type Stack struct {
	ConsoleURL string
	NC         *nats.Conn
	Cmd        *api.Client
	Query      *projector.Client
	Dir        string
	// Roles is the secure stack's roles directory (credentials, the
	// approver's signing key).
	Roles string
	// NATSURL is the dev stacks' NATS URL.
	NATSURL string
	stop    func()
}

// Stop stops the stack and removes its directory.
func (s *Stack) Stop() { s.stop() }

// Dev runs demo.Run (weft dev), with roles when secured, and connects
// to it (as the operator when secured). Secured is `weft dev --secure
// --require-identity` (demo.Run with Secure and RequireIdentity), whose
// agent's only approver takes signed proofs by the key in
// <roles>/approver.nk, which is also its one person key: every person's
// command must carry a proof signed with it and a reason
// (identity_required).
func Dev(secured bool) (*Stack, error) {
	dir, err := os.MkdirTemp("", "weft-console-test-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*Stack, error) { cancel(); os.RemoveAll(dir); return nil, err }
	natsURL, consoleURL := make(chan string, 1), make(chan string, 1)
	done := make(chan error, 1)
	roleDir := filepath.Join(dir, "roles")
	go func() {
		done <- demo.Run(ctx, demo.Options{DataDir: dir, Listen: "0", Console: "127.0.0.1:0", Secure: secured, SecureDir: roleDir, RequireIdentity: secured,
			Ready: func(u string) { natsURL <- u }, ConsoleReady: func(u string) { consoleURL <- u }})
	}()
	s := &Stack{Dir: dir, Roles: roleDir}
	select {
	case s.ConsoleURL = <-consoleURL:
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
	s.NC, s.Cmd, s.Query, s.NATSURL = nc, api.NewClient(nc), projector.NewClient(nc), u
	s.stop = func() {
		_ = node.Close(context.Background())
		cancel()
		<-done
		os.RemoveAll(dir)
	}
	return s, nil
}

// Hosted serves agents with host.Run (runner, projector, query service,
// catalog) on an embedded NATS server of their own, and a console of its
// own that talks to it.
func Hosted(name string, agents ...*agent.Agent) (*Stack, error) {
	dir, err := os.MkdirTemp("", "weft-console-"+name+"-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*Stack, error) { cancel(); os.RemoveAll(dir); return nil, err }
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
	s := &Stack{ConsoleURL: u, NC: nc, Cmd: api.NewClient(nc), Query: projector.NewClient(nc), Dir: dir}
	s.stop = func() {
		cancel()
		<-serveDone
		<-hostDone
		node.Close(context.Background())
		os.RemoveAll(dir)
	}
	return s, nil
}

// Start starts a demo run and waits until it has status want.
func (s *Stack) Start(t *testing.T, run, input, want string) projections.RunView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Cmd.Start(ctx, api.StartRequest{Run: run, Agent: demo.AgentName, Input: input}); err != nil {
		t.Fatalf("start %s: %v", run, err)
	}
	return s.WaitStatus(t, run, want)
}

// WaitStatus waits (45 s at most) until the run view has the status and
// the projector has stored it (the query answers a view folded to the log's
// head before that; the pages' lists, inboxes and audit panel read what
// the projector stored).
func (s *Stack) WaitStatus(t *testing.T, run, want string) projections.RunView {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last projections.RunView
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rep, err := s.Query.RunFamily(ctx, run)
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

// HistoryAll returns the run's whole history (one page: the tests' runs
// are short).
func (s *Stack) HistoryAll(t *testing.T, run string) []events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := s.Query.History(ctx, projector.HistoryRequest{Run: run, Limit: projector.MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	return h.Events
}

// History returns the run's events of one type.
func (s *Stack) History(t *testing.T, run string, name events.Name) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	for _, e := range s.HistoryAll(t, run) {
		if e.Type == name {
			out = append(out, e)
		}
	}
	return out
}

// Get fetches a console page without a browser.
func (s *Stack) Get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.ConsoleURL + path)
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

// ApproverKey returns the secure stack's approver signing key (the key in
// <roles>/approver.nk) and its public key.
func (s *Stack) ApproverKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(s.Roles, demo.ApproverKeyFile))
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

// ApproveByAPI approves the demo run's payment (action 2/call_2_1) as
// frank, through the command API.
func (s *Stack) ApproveByAPI(t *testing.T, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Cmd.Approve(ctx, api.ApproveRequest{CommandID: "test-" + run, Run: run, Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "frank"}); err != nil {
		t.Fatalf("approve %s: %v", run, err)
	}
}

// UnconfirmedByAPI records the run's uncertain payment as unconfirmed: it
// becomes an open question.
func (s *Stack) UnconfirmedByAPI(t *testing.T, run, note string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	content, _ := json.Marshal(map[string]string{"unconfirmed": note})
	if _, err := s.Cmd.Reconcile(ctx, api.ReconcileRequest{CommandID: "test-unconfirmed-" + run, Run: run, Action: "2/call_2_1", Content: content, By: "bob"}); err != nil {
		t.Fatalf("reconcile %s: %v", run, err)
	}
}

// Action returns the run view's action id, failing the test when the view
// has none.
func Action(t *testing.T, v projections.RunView, id string) projections.ActionView {
	t.Helper()
	for _, a := range v.Actions {
		if a.ID == id {
			return a
		}
	}
	b, _ := json.Marshal(v)
	t.Fatalf("no action %s in %s", id, b)
	return projections.ActionView{}
}

// CardKey is the DOM id of an inbox card (console's key rule for run ids
// and action ids of [A-Za-z0-9_-] and "/").
func CardKey(kind, run, action string) string {
	return kind + "-" + strings.ReplaceAll(run+"/"+action, "/", "_2f")
}

// WeftBinary builds cmd/weft into the test's own temporary directory
// (t.TempDir: removed when the test ends, however it ends) and returns its
// path. It builds in Weft's own module (the one the test's module requires
// or replaces it with), so that a test module of its own needs none of
// cmd/weft's requirements. Each call builds anew (Go's build cache makes
// that a link): a binary kept across tests would have to be removed by
// the package's TestMain, and one that nothing removed was 127 MB left in
// the temporary directory by every run.
func WeftBinary(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/weftrun/weft").Output()
	if err != nil {
		t.Fatalf("find Weft's module: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "weft")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/weft")
	cmd.Dir = strings.TrimSpace(string(root))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build weft: %v\n%s", err, out)
	}
	return bin
}

// Shared holds a test package's stacks, each started at most once by the
// first test that asks for it (Get) and all stopped together by the
// package's TestMain (Stop). The zero value is ready to use.
type Shared struct {
	mu      sync.Mutex
	stacks  map[string]*sharedStack
	started []*sharedStack
}

type sharedStack struct {
	once sync.Once
	s    *Stack
	err  error
}

// Get returns the stack named name, started by start the first time it is
// asked for; a stack that failed to start fails every test that asks for
// it, naming it.
func (sh *Shared) Get(t testing.TB, name string, start func() (*Stack, error)) *Stack {
	t.Helper()
	sh.mu.Lock()
	if sh.stacks == nil {
		sh.stacks = map[string]*sharedStack{}
	}
	e, ok := sh.stacks[name]
	if !ok {
		e = &sharedStack{}
		sh.stacks[name] = e
	}
	sh.mu.Unlock()
	e.once.Do(func() {
		e.s, e.err = start()
		if e.err == nil {
			sh.mu.Lock()
			sh.started = append(sh.started, e)
			sh.mu.Unlock()
		}
	})
	if e.err != nil {
		t.Fatalf("%s stack: %v", name, e.err)
	}
	return e.s
}

// Stop stops every stack Get started.
func (sh *Shared) Stop() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, e := range sh.started {
		e.s.Stop()
	}
	sh.started = nil
}
