package roles_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/worker"
)

// payQueue is the demo's send_payment queue, left to an external worker;
// lookupQueue is lookup_invoice's, run by the runner's in-process worker.
var (
	payQueue    = api.Queue{Agent: demo.AgentName, Version: "1", Tool: "send_payment"}
	lookupQueue = api.Queue{Agent: demo.AgentName, Version: "1", Tool: "lookup_invoice"}
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// shipped copies the repository's nats.conf and nats-secure.conf into a
// directory of their own with a fresh authority in its secure/ folder, as
// `weft roles init --dir secure` next to them would, and returns the
// secure configuration's path and the authority.
func shipped(t *testing.T) (string, *roles.Authority) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"nats.conf", "nats-secure.conf"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := roles.Open(filepath.Join(dir, "secure"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "nats-secure.conf"), auth
}

// violations collects a connection's permission violations.
type violations struct {
	mu   sync.Mutex
	errs []string
	ch   chan string
}

func newViolations() *violations { return &violations{ch: make(chan string, 1024)} }

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if err == nil || !strings.Contains(err.Error(), "Permissions Violation") {
		return
	}
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
	select {
	case v.ch <- err.Error():
	default:
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// expect waits for a violation naming what (a subject), discarding others.
func (v *violations) expect(t *testing.T, what string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e := <-v.ch:
			if strings.Contains(e, what) {
				return
			}
		case <-deadline:
			t.Fatalf("no permission violation for %s (got %v)", what, v.all())
		}
	}
}

// secureServer is a server started from the shipped secure configuration
// and the authority that issues its credentials.
type secureServer struct {
	t    *testing.T
	auth *roles.Authority
	url  string
	node *natsnode.Node // the server's own connection, as the runner
	v    *violations    // the runner connection's violations
}

func startSecure(t *testing.T, runnerOpts ...roles.IssueOption) *secureServer {
	t.Helper()
	conf, auth := shipped(t)
	creds, err := auth.Write(roles.Runner, api.Queue{}, runnerOpts...)
	if err != nil {
		t.Fatal(err)
	}
	v := newViolations()
	n, err := natsnode.Start(ctxT(t), natsnode.WithConfigFile(conf), natsnode.WithDataDir(filepath.Join(t.TempDir(), "store")),
		natsnode.WithListen(0), natsnode.WithCredsFile(creds), natsnode.WithName("runner"), natsnode.WithNATSOptions(nats.ErrorHandler(v.handler)))
	if err != nil {
		t.Fatalf("start the shipped secure configuration: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return &secureServer{t: t, auth: auth, url: n.URL(), node: n, v: v}
}

// connect connects with role's credentials (q for a worker).
func (s *secureServer) connect(role roles.Role, q api.Queue) (*natsnode.Node, *violations) {
	s.t.Helper()
	creds, err := s.auth.Write(role, q)
	if err != nil {
		s.t.Fatal(err)
	}
	v := newViolations()
	n, err := natsnode.Start(ctxT(s.t), natsnode.WithURL(s.url), natsnode.WithCredsFile(creds), natsnode.WithName(roles.Name(role, q)),
		natsnode.WithNATSOptions(nats.ErrorHandler(v.handler), nats.MaxReconnects(0)))
	if err != nil {
		s.t.Fatalf("connect as %s: %v", roles.Name(role, q), err)
	}
	s.t.Cleanup(func() { n.Close(context.Background()) })
	return n, v
}

// deployment is every component of the demo on the secure server, each
// with its own role's credentials: a runner (send_payment left to an
// external worker), a projector, the send_payment worker, an operator and
// a reader.
type deployment struct {
	*secureServer
	projector, worker, operator, reader *natsnode.Node
	vp, vw, vo, vr                      *violations
	paid                                chan string
}

func deploy(t *testing.T) *deployment { t.Helper(); return deployWith(t) }

// deployWith is deploy with the runner's credentials issued with
// runnerOpts (older credentials, say).
func deployWith(t *testing.T, runnerOpts ...roles.IssueOption) *deployment {
	t.Helper()
	s := startSecure(t, runnerOpts...)
	d := &deployment{secureServer: s, paid: make(chan string, 16)}
	d.projector, d.vp = s.connect(roles.Projector, api.Queue{})
	d.worker, d.vw = s.connect(roles.Worker, payQueue)
	d.operator, d.vo = s.connect(roles.Operator, api.Queue{})
	d.reader, d.vr = s.connect(roles.Reader, api.Queue{})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if err := runner.Provision(pctx, s.node.JetStream(), time.Second); err != nil {
		t.Fatalf("the runner provisions its assets: %v (refused %v)", err, s.v.all())
	}
	if err := provision.EnsureOnly(pctx, d.projector.JetStream(), projector.Assets()); err != nil {
		t.Fatalf("the projector provisions its buckets: %v (refused %v)", err, d.vp.all())
	}
	ag, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	rn, err := runner.New(s.node.Conn(), s.node.JetStream(), []*agent.Agent{ag}, runner.WithLease(time.Second), runner.WithExternalTools("send_payment"), runner.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(d.worker.Conn(), d.worker.JetStream(), worker.WithID("pay-worker"))
	w.Handle(payQueue, func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		d.paid <- task.Run
		if strings.Contains(string(task.Arguments), "INV-13") {
			return worker.Result{Outcome: api.OutcomeUncertain, Evidence: "the gateway timed out after the request was sent"}
		}
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"pay-` + task.Run + `","status":"sent"}`)}
	})
	wg.Add(3)
	go func() { defer wg.Done(); _ = rn.Run(ctx) }()
	go func() {
		defer wg.Done()
		_ = projector.RunAll(ctx, d.projector.Conn(), d.projector.JetStream(), eventlog.New(d.projector.JetStream()), logger)
	}()
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	if err := api.NewClient(d.operator.Conn()).Ready(pctx); err != nil {
		d.noViolations(t)
		t.Fatal(err)
	}
	return d
}

// noViolations fails the test if any component was refused anything.
func (d *deployment) noViolations(t *testing.T) {
	t.Helper()
	for name, v := range map[string]*violations{"runner": d.v, "projector": d.vp, "worker": d.vw, "operator": d.vo, "reader": d.vr} {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s was refused: %v", name, errs)
		}
	}
}

func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRolesDoTheirJobs: the demo runs end to end with every component on
// its own role's credentials from the shipped configuration — the runner
// provisions and drives runs, the projector projects and answers queries,
// the send_payment worker takes its task and reports it, the operator
// starts, approves, reconciles and cancels, the reader queries and reads
// the history and the read models — and no component is refused anything.
func TestRolesDoTheirJobs(t *testing.T) {
	d := deploy(t)
	ctx := ctxT(t)
	op := api.NewClient(d.operator.Conn())
	if _, err := op.Start(ctx, api.StartRequest{Schema: api.Schema, CommandID: "s-1", Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatalf("operator start: %v", err)
	}
	oq := projector.NewClient(d.operator.Conn())
	waitFor(t, "the approval request", func() (bool, bool) {
		it, err := oq.Approvals(ctx, projector.InboxRequest{Run: "pay-7"})
		return true, err == nil && len(it) == 1
	})
	if _, err := op.Approve(ctx, api.ApproveRequest{Schema: api.Schema, CommandID: "a-1", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatalf("operator approve: %v", err)
	}
	select {
	case <-d.paid:
	case <-ctx.Done():
		t.Fatal("the send_payment worker never got its task")
	}
	rq := projector.NewClient(d.reader.Conn())
	waitFor(t, "pay-7 finished", func() (string, bool) {
		v, err := rq.Run(ctx, "pay-7")
		return v.Status, err == nil && v.Status == "finished"
	})
	// The operator and the reader follow a run in the log (client.Wait:
	// an ordered consumer of their own on the run's subjects).
	for name, n := range map[string]*natsnode.Node{"operator": d.operator, "reader": d.reader} {
		c, err := client.New(n.Conn())
		if err != nil {
			t.Fatal(err)
		}
		if v, err := c.Wait(ctx, "pay-7", client.Finished); err != nil || v.Status != projections.StatusFinished {
			t.Fatalf("the %s's Wait: %v (status %s)", name, err, v.Status)
		}
	}

	// An uncertain payment, reconciled by the operator.
	if _, err := op.Start(ctx, api.StartRequest{Schema: api.Schema, CommandID: "s-3", Run: "pay-13", Agent: demo.AgentName, Input: "pay invoice INV-13"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-13 uncertain", func() (bool, bool) {
		rep, err := oq.Uncertain(ctx, projector.InboxRequest{Run: "pay-13"})
		return true, err == nil && len(rep.Items) == 1
	})
	if _, err := op.Reconcile(ctx, api.ReconcileRequest{Schema: api.Schema, CommandID: "r-1", Run: "pay-13", Action: "2/call_2_1", Content: json.RawMessage(`{"id":"pay-13","status":"sent"}`), By: "alice"}); err != nil {
		t.Fatalf("operator reconcile: %v", err)
	}
	waitFor(t, "pay-13 finished", func() (string, bool) {
		v, err := rq.Run(ctx, "pay-13")
		return v.Status, err == nil && v.Status == "finished"
	})

	// Cancel a run that waits for its approval.
	if _, err := op.Start(ctx, api.StartRequest{Schema: api.Schema, CommandID: "s-2", Run: "pay-9", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-9 waits", func() (bool, bool) {
		it, err := oq.Approvals(ctx, projector.InboxRequest{Run: "pay-9"})
		return true, err == nil && len(it) == 1
	})
	if _, err := op.Cancel(ctx, api.CancelRequest{Schema: api.Schema, CommandID: "c-1", Run: "pay-9", Reason: "test"}); err != nil {
		t.Fatalf("operator cancel: %v", err)
	}

	// The reader: every query, the history, the log and the read models.
	if _, err := rq.List(ctx, projections.ListQuery{}); err != nil {
		t.Fatalf("reader list: %v", err)
	}
	if _, err := rq.Uncertain(ctx, projector.InboxRequest{}); err != nil {
		t.Fatalf("reader uncertain: %v", err)
	}
	if _, err := rq.History(ctx, projector.HistoryRequest{Run: "pay-7"}); err != nil {
		t.Fatalf("reader history: %v", err)
	}
	envs, _, err := eventlog.New(d.reader.JetStream()).Load(ctx, "pay-7")
	if err != nil || len(envs) == 0 {
		t.Fatalf("reader reads the log: %d events, %v", len(envs), err)
	}
	kv, err := d.reader.JetStream().KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatalf("reader opens weft_views: %v", err)
	}
	if _, err := kv.Get(ctx, "pay-7"); err != nil {
		t.Fatalf("reader reads a view: %v", err)
	}
	// The projector rebuilds every read model from the log.
	if _, err := projector.Rebuild(ctx, d.projector.JetStream(), eventlog.New(d.projector.JetStream()), nil); err != nil {
		t.Fatalf("projector rebuild: %v", err)
	}
	// A refusal is an answer too: the reader asks about a run that does
	// not exist.
	if _, err := rq.Run(ctx, "nope"); !errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
		t.Fatalf("reader run nope: %v", err)
	}
	d.noViolations(t)
}
