// Package demo is Weft's payment-desk demo: an agent driven by a scripted
// model (or a real one) that looks invoices up (a replayable read), pays
// them (send_payment, approval above 100 EUR; invoice INV-13's gateway
// times out after sending, so its effect is uncertain) and refunds them
// (a settling tool), and Run, which starts everything `weft dev` needs on
// an embedded NATS server.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/nats-io/nkeys"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/runner"
)

// Options configure Run.
type Options struct {
	// DataDir is the embedded server's store directory (default: natsnode's).
	DataDir string
	// Listen is the TCP address or port the embedded server listens on
	// (loopback only), such as "4222" or "127.0.0.1:4222"; empty picks a
	// free port.
	Listen string
	// NATSURL connects to an external server instead of embedding one.
	NATSURL string
	// SyncInterval is the embedded server's sync interval
	// (natsnode.WithSyncInterval): empty or "always", the default, fsyncs
	// every write before its acknowledgement; an interval such as "2m" is
	// faster and not durable against a power loss. Run prints which one it
	// runs with.
	SyncInterval string
	// Model replaces the scripted model.
	Model model.Model
	// Stdout receives the instructions; nil discards them.
	Stdout io.Writer
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// ExternalTools names demo tools whose tasks are left to workers
	// outside the process (such as the nats CLI, docs/protocol/41-tasks.md).
	ExternalTools []string
	// Ready, when set, is called with the NATS URL once everything serves.
	Ready func(url string)
	// Weft is how the printed steps call the weft command in another
	// terminal ("weft" when empty; cmd/weft passes "go run ./cmd/weft"
	// when it runs through go run, or its own path).
	Weft string
	// Dir, when set, is the directory the printed steps must run in (a
	// checkout, for go run).
	Dir string
	// Events receives one line per event appended to the log while Run
	// runs (FeedLine) and the line saying what was handed off when it
	// stops; nil prints them on Stdout, io.Discard drops them.
	Events io.Writer
	// Console is the operator console's listen address (weft dev:
	// console.DefaultAddr; when it is taken a free port is used); empty
	// starts no console.
	Console string
	// ConsoleReady, when set, is called with the console's URL once it
	// serves.
	ConsoleReady func(url string)
	// Secure starts the embedded server with Weft's roles (package roles,
	// docs/security.md): the runner and the projector connect with their
	// own credentials, every role's credentials file is written to
	// SecureDir (default: "roles" in the store directory) and printed, and
	// the agent's only approver takes signed proofs by the key in
	// SecureDir/approver.nk. It needs the embedded server (no NATSURL).
	Secure    bool
	SecureDir string
	// RequireIdentity makes the runner refuse a person's command that does
	// not say who made it and why (identity_required; docs/security.md,
	// "Who did it"): in secure mode, one without a proof signed by the
	// approver key, otherwise one without a name.
	RequireIdentity bool
}

// Run starts (or connects to) NATS, provisions every asset, and runs a
// runner with its in-process worker, the projector and query service, and
// the payment desk agent until ctx ends; then it drains and stops.
func Run(ctx context.Context, o Options) error {
	out := o.Stdout
	if out == nil {
		out = io.Discard
	}
	out = &lockedWriter{w: out}
	evOut := o.Events
	if evOut == nil {
		evOut = out
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var nopts []natsnode.Option
	if o.NATSURL != "" {
		nopts = append(nopts, natsnode.WithURL(o.NATSURL))
	} else {
		port, err := listenPort(o.Listen)
		if err != nil {
			return err
		}
		if err := portFree(port); err != nil {
			return err
		}
		nopts = append(nopts, natsnode.WithListen(port))
		if o.DataDir != "" {
			nopts = append(nopts, natsnode.WithDataDir(o.DataDir))
		}
		if o.SyncInterval != "" {
			nopts = append(nopts, natsnode.WithSyncInterval(o.SyncInterval))
		}
	}
	var sec *secured
	if o.Secure {
		if o.NATSURL != "" {
			return errors.New("demo: secure mode runs the embedded server: leave NATS_URL unset (secure an external server with nats-secure.conf, docs/security.md)")
		}
		dir := o.SecureDir
		if dir == "" {
			store := o.DataDir
			if store == "" {
				d, err := natsnode.DefaultDataDir()
				if err != nil {
					return err
				}
				store = d
			}
			dir = filepath.Join(store, "roles")
		}
		var err error
		if sec, err = prepareSecure(dir, o.ExternalTools); err != nil {
			return err
		}
		nopts = append(nopts, sec.nodeOptions(logger)...)
	}
	node, err := natsnode.Start(ctx, nopts...)
	if err != nil {
		return fmt.Errorf("demo: nats: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Close(cctx)
	}()
	if err := runner.CheckMaxPayload(node.Conn()); err != nil {
		fmt.Fprintf(out, "warning: %v\n\n", err)
	}
	fmt.Fprintln(out, Durability(node))
	js := node.JetStream()
	const lease = time.Second
	// In secure mode the projector and the query service connect with the
	// projector's credentials (host.WithQueriesOn), which provision their
	// buckets.
	var hopts []host.Option
	if sec != nil {
		pnode, err := sec.connect(ctx, node.URL(), roles.Projector, "weft dev projector", logger)
		if err != nil {
			return err
		}
		defer closeQuietly(pnode)
		hopts = append(hopts, host.WithQueriesOn(pnode.Conn(), pnode.JetStream()))
	}
	ag, err := Agent(o.Model)
	if sec != nil {
		ag, err = agentWith(o.Model, sec.approvers()...)
	}
	if err != nil {
		return err
	}
	for _, x := range o.ExternalTools {
		if _, ok := ag.Tool(x); !ok {
			return fmt.Errorf("demo: external tool %q: not a tool of %s", x, AgentName)
		}
	}
	// One head signing key per store (docs/adr/0026-signed-heads.md).
	headKey, headPub, err := storeHeadKey(node, o.DataDir)
	if err != nil {
		return err
	}
	people := approvers.People{Require: o.RequireIdentity}
	if sec != nil {
		people.Keys = sec.people()
	}
	ropts := []runner.Option{runner.WithExternalTools(o.ExternalTools...), runner.WithHeadKey(headKey), runner.WithPeople(people)}
	if always, _, known := node.Sync(); always && known {
		// One fsync for many runs' decisions when 16 or more wait at once
		// (docs/adr/0025-group-commit.md): on for a server that syncs
		// always, where it saves fsyncs; it costs more than it saves on
		// one that syncs on an interval.
		ropts = append(ropts, runner.WithGroupCommit())
	}
	// Before the node starts: the runs the printed steps name (on a
	// restarted store, ids no run has yet) and the end of the log, where
	// the feed starts, so that it prints what happens from now on (not
	// the history of a restarted store).
	evlog := eventlog.New(js)
	runs, seq, err := startOfFeed(ctx, js, evlog)
	if err != nil {
		return err
	}
	// The node, as an application runs it (package host): provisioning,
	// a runner with its in-process worker, the projector, the query
	// service and the catalog, until ctx ends and the runner drains.
	hctx, stopHost := context.WithCancel(ctx)
	defer stopHost()
	ready := make(chan struct{})
	hopts = append(hopts, host.WithLogger(logger), host.WithLease(lease), host.WithRunnerOptions(ropts...), host.WithReady(func() { close(ready) }))
	hostDone := make(chan error, 1)
	go func() { hostDone <- host.Run(hctx, node.Conn(), js, []*agent.Agent{ag}, hopts...) }()
	// fail stops the node (its runner drains) and returns err with what
	// the node returned.
	fail := func(err error) error {
		stopHost()
		return errors.Join(err, <-hostDone)
	}
	// Wait until the command API and the query service serve every
	// endpoint (host.WithReady) before saying what to do next.
	store := ""
	if node.Embedded() {
		store = node.DataDir()
	}
	// The feed prints the log from seq+1 (through the drain after ctx
	// ends); stopped prints it to its end and says what was handed off.
	fd := &feed{w: evOut, log: evlog, seq: seq, handed: map[string]bool{}, finished: map[string]bool{}, seen: map[string]bool{}}
	fctx, stopFeed := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFeed()
	feedDone := make(chan error, 1)
	startFeed := func() { go func() { feedDone <- fd.run(fctx, seq+1) }() }
	stopped := func(stream jetstream.Stream) {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		fd.caughtUp(cctx, stream)
		ccancel()
		stopFeed()
		<-feedDone
		fmt.Fprintln(evOut, stopLine(fd.handedOff(), fd.idle(context.Background(), fd.waiting(), 5*time.Second), store))
	}
	wait := time.NewTimer(readyWait)
	select {
	case <-ready:
	case err := <-hostDone:
		if ctx.Err() == nil {
			return err
		}
		// Stopped before the node was ready: what the drain handed off
		// is in the log all the same.
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, serr := js.Stream(sctx, eventlog.Stream)
		scancel()
		if serr != nil {
			fmt.Fprintln(evOut, "Stopped before the node was ready.")
		} else {
			startFeed()
			stopped(stream)
		}
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	case <-wait.C:
		if ctx.Err() == nil {
			logger.Warn("demo: the command API or the query service did not answer every endpoint within the wait; printing the steps all the same", "wait", readyWait)
		}
	}
	wait.Stop()
	stream, err := js.Stream(ctx, eventlog.Stream)
	if err != nil {
		return fail(fmt.Errorf("demo: %w", err))
	}
	startFeed()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	if o.Console != "" {
		cconn := node.Conn()
		if sec != nil {
			// The console is an operator's client: its own credentials.
			onode, err := sec.connect(ctx, node.URL(), roles.Operator, "weft dev console", logger)
			if err != nil {
				return fail(err)
			}
			defer closeQuietly(onode)
			cconn = onode.Conn()
			fmt.Fprintf(out, "The console runs as the operator; its approval forms sign the proof in your browser with the approver's signing key (paste it or choose its file, below: it never leaves the page), or approve with %s approve --signing-key.\n", weftOr(o.Weft))
		}
		url, err := startConsole(ctx, &wg, errs, cconn, o.Console, logger)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "Console: %s (approve, reconcile and read runs in a browser)\n\n", url)
		if o.ConsoleReady != nil {
			o.ConsoleReady(url)
		}
	}
	where := "embedded NATS at " + node.URL()
	if o.NATSURL != "" {
		where = "external NATS at " + node.URL() // NATS_URL: a server weft dev did not start
	}
	weft := o.Weft
	if weft == "" {
		weft = "weft"
	}
	// The steps are written in one Write, so that a reader of out (a
	// terminal, a test waiting for "Weft dev is running") never sees the
	// first line without the steps after it.
	var steps bytes.Buffer
	if sec != nil {
		fmt.Fprintf(&steps, "Weft dev is running: %s, a runner with its worker, the projector,\nand the %s agent on model %s, in secure mode.\n\n", where, AgentName, ag.Model().Name())
		sec.print(&steps, weft, node.URL(), runs)
	} else {
		printNext(&steps, next{where: where, url: node.URL(), model: ag.Model().Name(), weft: weft, dir: o.Dir, runs: runs,
			externalPay: slices.Contains(o.ExternalTools, "send_payment")})
	}
	fmt.Fprintf(&steps, "\nRun heads are signed by this store's runner key %s (docs/security.md): check an export with\n  %s audit verify --file <export.jsonl> --trust %s\n", headPub, weft, headPub)
	if sec != nil {
		fmt.Fprintf(&steps, "It lists the people's signed commands with their keys, not checked against people's keys. They are signed by the approver key: to check that too, write a trust file FILE of the two lines\n    %s weft-dev\n    person %s demo approver\nand run\n  %s audit verify --file <export.jsonl> --trust-file FILE\n", headPub, sec.approver, weft)
	}
	if _, err := out.Write(steps.Bytes()); err != nil {
		logger.Debug("print the steps", "err", err)
	}
	if o.Ready != nil {
		o.Ready(node.URL())
	}
	errs <- <-hostDone
	wg.Wait()
	// The drain's hand-offs are in the log: print them, then say what
	// was handed off.
	stopped(stream)
	close(errs)
	var all []error
	for e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

// readyWait bounds Run's wait for the node to serve every endpoint: then
// it warns and prints the steps all the same.
const readyWait = 30 * time.Second

// startOfFeed returns the runs the printed steps name and the log's last
// stream sequence, where the feed starts: on a store without a log yet,
// DefaultRuns and 0; otherwise the ids no run has yet (freeRuns) and the
// stream's last sequence.
func startOfFeed(ctx context.Context, js jetstream.JetStream, log *eventlog.Log) (Runs, uint64, error) {
	stream, err := js.Stream(ctx, eventlog.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return DefaultRuns(), 0, nil
	}
	if err != nil {
		return Runs{}, 0, fmt.Errorf("demo: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return Runs{}, 0, fmt.Errorf("demo: %w", err)
	}
	runs, err := freeRuns(ctx, log)
	return runs, info.State.LastSeq, err
}

// Durability says how the node's server keeps acknowledged events (its
// sync interval, docs/reliability.md) and how to choose the other mode:
// the line weft dev prints when it starts.
func Durability(node *natsnode.Node) string {
	always, every, known := node.Sync()
	switch {
	case !known:
		return "Durability: the external server's own sync_interval (a client cannot read it; the repository's nats.conf sets always:\nan fsync before every acknowledgement, docs/reliability.md)."
	case always:
		return "Durability: sync_interval always: the embedded server fsyncs every write before acknowledging it, so an acknowledged\nevent survives a power loss (docs/reliability.md). Faster but not durable: --sync-interval 2m (or " + natsnode.EnvSyncInterval + "=2m)."
	default:
		return fmt.Sprintf("Durability: sync_interval %s, NOT durable: a power loss or a kernel crash can lose the events acknowledged in the\nlast %s, and an effect recorded in them may then run again (docs/reliability.md). Durable, the default: --sync-interval always.", every, every)
	}
}

// ErrPortInUse is returned by Run when the port it should listen on is
// taken (another weft dev, or any other server): a local problem, not a
// NATS one.
var ErrPortInUse = errors.New("demo: port in use")

// portFree checks that the embedded server can listen on 127.0.0.1:port
// (0 always can), so that a taken port is said as such instead of as a
// server that never became ready.
func portFree(port int) error {
	if port == 0 {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: 127.0.0.1:%d: %v (is another weft dev running? run the demo against it with weft dev --nats nats://127.0.0.1:%d, or pick another port with --listen)", ErrPortInUse, port, err, port)
	}
	return l.Close()
}

// startConsole serves the operator console on addr (a free loopback port
// when addr is taken) until ctx ends, and returns its URL.
func startConsole(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, nc *nats.Conn, addr string, logger *slog.Logger) (string, error) {
	c, err := console.New(nc, console.WithLogger(logger), console.WithApprover(Approver),
		console.WithCredentialHelp("The demo approver "+Approver+" accepts any non-empty credential and records it as the reviewer: type your name."),
		console.WithStart(AgentName, "pay invoice INV-7", "pay invoice INV-13", "pay invoice INV-8", "refund invoice INV-8"))
	if err != nil {
		return "", err
	}
	ln, url, err := console.Listen(addr)
	if err != nil {
		logger.Warn("demo: console address taken, using a free port", "addr", addr, "err", err)
		if ln, url, err = console.Listen("127.0.0.1:0"); err != nil {
			return "", err
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs <- c.Serve(ctx, ln) }()
	return url, nil
}

func listenPort(listen string) (int, error) {
	if listen == "" {
		return 0, nil
	}
	p := listen
	if strings.Contains(listen, ":") {
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			return 0, fmt.Errorf("demo: listen %q: %w", listen, err)
		}
		p = port
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("demo: listen %q: not a port", listen)
	}
	return n, nil
}

// storeHeadKey loads or creates the runner's head signing key of the
// store: runner.HeadKeyFile in the embedded server's store directory (or
// in dataDir for an external server). An external server without dataDir
// has no store directory here: the key is made for this process only.
func storeHeadKey(node *natsnode.Node, dataDir string) (nkeys.KeyPair, string, error) {
	store := dataDir
	if node.Embedded() {
		store = node.DataDir()
	}
	var kp nkeys.KeyPair
	var err error
	if store == "" {
		kp, err = nkeys.CreateUser()
	} else {
		kp, _, err = runner.LoadOrCreateHeadKey(filepath.Join(store, runner.HeadKeyFile))
	}
	if err != nil {
		return nil, "", fmt.Errorf("demo: %w", err)
	}
	pub, err := kp.PublicKey()
	return kp, pub, err
}
