package demo

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/protocol"
)

// Runs are the run ids the steps Run prints use. Run picks ids no run on
// the store has yet (pay-7, else pay-7-2, pay-7-3, …), so that the steps
// work verbatim after a restart on the same data, when the first ones
// exist already.
type Runs struct {
	// Pay is the 1200 EUR payment that waits for an approval.
	Pay string
	// Uncertain is INV-13's payment, whose effect is uncertain.
	Uncertain string
	// Refund is the refund, settled after its body stopped.
	Refund string
	// NATS is the payment of the nats-CLI steps.
	NATS string
}

// DefaultRuns returns the ids on an empty store.
func DefaultRuns() Runs {
	return Runs{Pay: "pay-7", Uncertain: "pay-13", Refund: "refund-8", NATS: NATSRun}
}

// NATSRun is the run id the nats-CLI steps use on an empty store (distinct
// from the weft-CLI steps' pay-7, so that both can be followed).
const NATSRun = "pay-7-nats"

// freeRuns returns DefaultRuns() with every id that names an existing run
// replaced by the first free one of id-2, id-3, …
func freeRuns(ctx context.Context, log *eventlog.Log) (Runs, error) {
	free := func(base string) (string, error) {
		for n := 1; ; n++ {
			id := base
			if n > 1 {
				id = base + "-" + strconv.Itoa(n)
			}
			h, err := log.Head(ctx, id)
			if err != nil {
				return "", err
			}
			if h.IsZero() {
				return id, nil
			}
		}
	}
	var r Runs
	var err error
	d := DefaultRuns()
	for _, f := range []struct {
		dst  *string
		base string
	}{{&r.Pay, d.Pay}, {&r.Uncertain, d.Uncertain}, {&r.Refund, d.Refund}, {&r.NATS, d.NATS}} {
		if *f.dst, err = free(f.base); err != nil {
			return Runs{}, fmt.Errorf("demo: pick run ids: %w", err)
		}
	}
	return r, nil
}

// Step is one command line Run prints, with what it shows.
type Step struct {
	// Command is the shell command line, verbatim.
	Command string
	// Note is the comment printed after it ("" for none).
	Note string
}

// Line is the step as printed: the command and its note as a shell
// comment, so that the whole line can be pasted.
func (s Step) Line() string {
	if s.Note == "" {
		return s.Command
	}
	return s.Command + "   # " + s.Note
}

// WeftSteps returns the weft-CLI steps Run prints, in order, for a server
// at url: weft is how to call the weft command in another terminal of the
// same directory ("weft" when it is installed, "go run ./cmd/weft" in a
// checkout, or a binary's path). They work verbatim when followed in order
// a moment apart, as a person reads each answer before the next step: the
// approval waits for the run to ask for it (the inbox before it shows
// that), the reconciliation for the payment to become uncertain (the show
// before it).
func WeftSteps(weft, url string, r Runs) []Step {
	return []Step{
		{Command: "export NATS_URL=" + url},
		{Command: fmt.Sprintf(`%s start %s "pay invoice INV-7" --run %s`, weft, AgentName, r.Pay), Note: "1200 EUR: waits for a finance approval"},
		{Command: weft + " inbox approvals", Note: "what waits for a person"},
		{Command: fmt.Sprintf("%s approve %s 2/call_2_1 --approver %s --credential alice", weft, r.Pay, Approver),
			Note: "demo only: the approver " + Approver + " accepts any credential as the reviewer's name"},
		{Command: fmt.Sprintf("%s show %s", weft, r.Pay), Note: "finished: completed, the payment sent"},
		{Command: fmt.Sprintf(`%s start %s "pay invoice INV-13" --run %s`, weft, AgentName, r.Uncertain), Note: "the gateway times out after sending: uncertain"},
		{Command: fmt.Sprintf("%s show %s", weft, r.Uncertain), Note: "suspended: effect uncertain, and the command that reconciles it"},
		{Command: fmt.Sprintf(`%s reconcile %s 2/call_2_1 --unconfirmed "checking with the bank"`, weft, r.Uncertain), Note: "the run goes on; the question stays open"},
		{Command: weft + " inbox questions", Note: "every open question: run, tool, arguments, note"},
		{Command: fmt.Sprintf(`%s resolve %s 2/call_2_1 --output '{"id":"PAY-13","status":"sent"}' --by alice`, weft, r.Uncertain), Note: "the bank says it went out: recorded for audit, the run unchanged"},
		{Command: fmt.Sprintf(`%s start %s "refund invoice INV-8" --run %s`, weft, AgentName, r.Refund), Note: "the processor confirms 3 s later"},
		{Command: fmt.Sprintf("%s show %s", weft, r.Refund), Note: "waiting for a settlement, then finished: completed"},
		{Command: fmt.Sprintf("%s events %s", weft, r.Refund), Note: "the timeline, one line per event"},
	}
}

// NATSSteps returns the nats-CLI commands Run prints, in order, each a
// complete command line for a server at url, for the run run (Runs.NATS);
// externalPay adds taking send_payment's task, claiming its attempt and
// reporting it (weft dev --external-tool send_payment). They work verbatim when followed in order,
// a moment apart: the approval waits for the run to ask for it (the query
// before it shows that).
func NATSSteps(url, run string, externalPay bool) []string {
	q := func(subject, body string) string {
		return fmt.Sprintf("nats --server %s req %s '%s'", url, subject, body)
	}
	steps := []string{
		fmt.Sprintf("nats --server %s micro ls", url),
		q("weft.api.start", fmt.Sprintf(`{"schema":1,"command_id":"n-1","run":"%s","agent":"%s","input":"pay invoice INV-7"}`, run, AgentName)),
		q("weft.api.query.approvals", `{}`),
		q("weft.api.approve", fmt.Sprintf(`{"schema":1,"command_id":"n-2","run":"%s","action":"2/call_2_1","revision":1,"approver":"%s","credential":"alice"}`, run, Approver)),
	}
	if externalPay {
		steps = append(steps,
			fmt.Sprintf("nats --server %s consumer next %s %s", url, protocol.TasksStream,
				api.Queue{Agent: AgentName, Version: "1", Tool: "send_payment"}.Consumer()),
			fmt.Sprintf("nats --server %s kv create %s %s cli --ttl 40m", url, protocol.ClaimsBucket, api.ClaimKey(run, "2/call_2_1", 1, 1)),
			q("weft.api.report", fmt.Sprintf(`{"schema":1,"command_id":"report/%[1]s/2/call_2_1/1/1","run":"%[1]s","action":"2/call_2_1","attempt":1,"incarnation":1,"outcome":"output","content":{"id":"%[1]s","status":"sent"},"worker":"cli"}`, run)))
	}
	return append(steps, q("weft.api.query.run", fmt.Sprintf(`{"run":"%s"}`, run)))
}

// next is what printNext says.
type next struct {
	where, url, model string
	weft, dir         string // how to call weft, and in which directory
	runs              Runs
	externalPay       bool
}

func printNext(w io.Writer, n next) {
	fmt.Fprintf(w, `Weft dev is running: %s, a runner with its worker, the projector,
and the %s agent on model %s.

`, n.where, AgentName, n.model)
	in := "another terminal"
	if n.dir != "" {
		in += ", in " + n.dir
	}
	fmt.Fprintf(w, "Try it (%s):\n\n", in)
	for i, st := range WeftSteps(n.weft, n.url, n.runs) {
		if i == 5 || i == 10 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  %s\n", st.Line())
	}
	fmt.Fprintln(w)
	if strings.HasPrefix(n.weft, "go run ") {
		fmt.Fprintf(w, "(The first go run compiled weft: 3.5 CPU-minutes with -tags nosdk — about 2 minutes on 2 idle cores, less on more —\nand about three times that without it, when the OpenAI and Anthropic SDKs are compiled too; most of the rest is the Go\nstandard library, nats-server and OpenTelemetry. The go run steps above run the binary from Go's build cache in a\nsecond or two; %s puts weft on your PATH.)\n\n",
			strings.Replace(n.weft, "go run ", "go install ", 1))
	}
	if n.externalPay {
		fmt.Fprintf(w, `send_payment's tasks are left to you (the consumer
weft_task_payment-desk@1@send_payment exists): after an approval, take the task, claim its attempt and report it (see
the nats steps).

`)
	}
	fmt.Fprintf(w, "Or with the nats CLI only (%s: INV-7, 1200 EUR, waits for approval; the approver %s accepts any credential):\n\n", n.runs.NATS, Approver)
	for _, st := range NATSSteps(n.url, n.runs.NATS, n.externalPay) {
		fmt.Fprintf(w, "  %s\n", st)
	}
	fmt.Fprintf(w, "\nWhat the runs do is printed here as it happens, one line per event. Stop with Ctrl-C (the runner drains and hands its runs off).\n\n")
}
