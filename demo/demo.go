// Package demo is Weft's payment-desk demo: an agent driven by a scripted
// model (or a real one) that looks invoices up (a replayable read), pays
// them (send_payment, approval above 100 EUR; invoice INV-13's gateway
// times out after sending, so its effect is uncertain) and refunds them
// (a settling tool), and Run, which starts everything `weft dev` needs on
// an embedded NATS server.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
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
}

// Run starts (or connects to) NATS, provisions every asset, and runs a
// runner with its in-process worker, the projector and query service, and
// the payment desk agent until ctx ends; then it drains and stops.
func Run(ctx context.Context, o Options) error {
	out := o.Stdout
	if out == nil {
		out = io.Discard
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
	js := node.JetStream()
	const lease = time.Second
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = runner.Provision(pctx, js, lease, runner.WithAssets(projector.Assets()...))
	cancel()
	if err != nil {
		return fmt.Errorf("demo: provision: %w", err)
	}
	ag, err := Agent(o.Model)
	if err != nil {
		return err
	}
	for _, x := range o.ExternalTools {
		if _, ok := ag.Tool(x); !ok {
			return fmt.Errorf("demo: external tool %q: not a tool of %s", x, AgentName)
		}
	}
	rn, err := runner.New(node.Conn(), js, []*agent.Agent{ag}, runner.WithLogger(logger), runner.WithLease(lease), runner.WithExternalTools(o.ExternalTools...))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- rn.Run(ctx) }()
	go func() {
		defer wg.Done()
		errs <- projector.RunAll(ctx, node.Conn(), js, eventlog.New(js), logger)
	}()
	// Wait until the command API serves every endpoint before saying what
	// to do next (a $SRV.INFO probe: no command, nothing in its stats).
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	rerr := api.NewClient(node.Conn()).Ready(rctx)
	rcancel()
	if rerr != nil && ctx.Err() == nil {
		logger.Warn("demo: the command API is not ready yet", "err", rerr)
	}
	qctx, qcancel := context.WithTimeout(ctx, 30*time.Second)
	qerr := queriesReady(qctx, node.Conn())
	qcancel()
	if qerr != nil && ctx.Err() == nil {
		logger.Warn("demo: the query service is not ready yet", "err", qerr)
	}
	where := "embedded NATS at " + node.URL()
	if o.NATSURL != "" {
		where = "external NATS at " + node.URL() // NATS_URL: a server weft dev did not start
	}
	printNext(out, where, node.URL(), ag.Model().Name(), slices.Contains(o.ExternalTools, "send_payment"))
	if o.Ready != nil {
		o.Ready(node.URL())
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
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
		return fmt.Errorf("%w: 127.0.0.1:%d: %v (is another weft dev running? use it with NATS_URL=nats://127.0.0.1:%d, or pick another port with --listen)", ErrPortInUse, port, err, port)
	}
	return l.Close()
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

// NATSRun is the run id the nats-CLI steps printed by Run use (distinct
// from the weft-CLI steps' pay-7, so that both can be followed).
const NATSRun = "pay-7-nats"

// NATSSteps returns the nats-CLI commands Run prints, in order, each a
// complete command line for a server at url; externalPay adds taking and
// reporting send_payment's task (weft dev --external-tool send_payment).
// They work verbatim when followed in order, a moment apart: the approval
// waits for the run to ask for it (the query before it shows that).
func NATSSteps(url string, externalPay bool) []string {
	q := func(subject, body string) string {
		return fmt.Sprintf("nats --server %s req %s '%s'", url, subject, body)
	}
	steps := []string{
		fmt.Sprintf("nats --server %s micro ls", url),
		q("weft.api.start", fmt.Sprintf(`{"schema":1,"command_id":"n-1","run":"%s","agent":"%s","input":"pay invoice INV-7"}`, NATSRun, AgentName)),
		q("weft.api.query.approvals", `{}`),
		q("weft.api.approve", fmt.Sprintf(`{"schema":1,"command_id":"n-2","run":"%s","action":"2/call_2_1","revision":1,"approver":"%s","credential":"alice"}`, NATSRun, Approver)),
	}
	if externalPay {
		steps = append(steps,
			fmt.Sprintf("nats --server %s consumer next WEFT_TASKS weft_task_payment-desk@1@send_payment", url),
			q("weft.api.report", fmt.Sprintf(`{"schema":1,"command_id":"report/%[1]s/2/call_2_1/1/1","run":"%[1]s","action":"2/call_2_1","attempt":1,"incarnation":1,"outcome":"output","content":{"id":"%[1]s","status":"sent"},"worker":"cli"}`, NATSRun)))
	}
	return append(steps, q("weft.api.query.run", fmt.Sprintf(`{"run":"%s"}`, NATSRun)))
}

func printNext(w io.Writer, where, url, modelName string, externalPay bool) {
	fmt.Fprintf(w, `Weft dev is running: %[5]s, a runner with its worker, the projector,
and the %[2]s agent on model %[3]s.

Try it (another terminal):

  export NATS_URL=%[1]s
  weft start %[2]s "pay invoice INV-7" --run pay-7        # 1200 EUR: waits for approval
  weft inbox approvals
  weft approve pay-7 2/call_2_1 --revision 1 --approver %[4]s --credential alice
  weft show pay-7

  weft start %[2]s "pay invoice INV-13" --run pay-13      # gateway times out: uncertain
  weft reconcile pay-13 2/call_2_1 '{"unconfirmed":"checking with the bank"}'

  weft start %[2]s "refund invoice INV-8" --run refund-8  # settles asynchronously

`, url, AgentName, modelName, Approver, where)
	if externalPay {
		fmt.Fprintf(w, `send_payment's tasks are left to you (the consumer
weft_task_payment-desk@1@send_payment exists): after an approval, take the task and report it (see the nats steps).

`)
	}
	fmt.Fprintf(w, "Or with the nats CLI only (%s: INV-7, 1200 EUR, waits for approval):\n\n", NATSRun)
	for _, st := range NATSSteps(url, externalPay) {
		fmt.Fprintf(w, "  %s\n", st)
	}
	fmt.Fprintf(w, "\nStop with Ctrl-C (the runner drains and hands its runs off).\n")
}

// queriesReady waits until the projector's query service lists every query
// endpoint (a $SRV.INFO probe), so the printed nats CLI steps that query
// answer at once.
func queriesReady(ctx context.Context, nc *nats.Conn) error {
	want := []string{projector.EndpointRun, projector.EndpointList, projector.EndpointApprovals, projector.EndpointUncertain, projector.EndpointHistory}
	for {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		m, err := nc.RequestWithContext(rctx, "$SRV.INFO."+projector.ServiceName, nil)
		cancel()
		if err == nil {
			var info micro.Info
			if json.Unmarshal(m.Data, &info) == nil {
				got := make(map[string]bool, len(info.Endpoints))
				for _, e := range info.Endpoints {
					got[e.Subject] = true
				}
				all := true
				for _, e := range want {
					all = all && got[projector.QueryPrefix+"."+e]
				}
				if all {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
