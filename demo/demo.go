// Package demo is Weft's payment-desk demo: an agent driven by a scripted
// model (or a real one) that looks invoices up (a replayable read), pays
// them (send_payment, approval above 100 EUR; invoice INV-13's gateway
// times out after sending, so its effect is uncertain) and refunds them
// (a settling tool), and Run, which starts everything `weft dev` needs on
// an embedded NATS server.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
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
	js := node.JetStream()
	const lease = time.Second
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = provision.Ensure(pctx, js, provision.Options{}, append(runner.Assets(lease), projector.Assets()...)...)
	if err == nil {
		err = runner.Provision(pctx, js, lease)
	}
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
	// Wait until the command API answers before saying what to do next.
	for deadline := time.Now().Add(30 * time.Second); ctx.Err() == nil && time.Now().Before(deadline); {
		if _, err := node.Conn().Request(api.SubjectPrefix+api.EndpointCancel, []byte("{}"), 100*time.Millisecond); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	printNext(out, node.URL(), ag.Model().Name())
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

func printNext(w io.Writer, url, modelName string) {
	fmt.Fprintf(w, `Weft dev is running: embedded NATS at %[1]s, a runner with its worker, the projector,
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

Or with the nats CLI only:

  nats --server %[1]s micro ls
  nats --server %[1]s req weft.api.start '{"schema":1,"run":"pay-8","agent":"%[2]s","input":"pay invoice INV-8"}'
  nats --server %[1]s req weft.api.approve '{"schema":1,"command_id":"a1","run":"pay-7","action":"2/call_2_1","revision":1,"approver":"%[4]s","credential":"alice"}'
  nats --server %[1]s req weft.api.query.run '{"schema":1,"run":"pay-8"}'

Stop with Ctrl-C (the runner drains and hands its runs off).
`, url, AgentName, modelName, Approver)
}
