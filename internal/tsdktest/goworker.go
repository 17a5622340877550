package tsdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// GoWorker is the Go worker (package worker) as a process's main, for
// RunWorkerSuite: it serves echo, slow, settle, replay and guarded of agent tsdk at the
// given version until SIGTERM or SIGINT; each body writes "STARTED <run>
// <attempt>" to stdout, then by its input's mode: "" returns {text};
// "hang" runs until its context ends; "hang-first" does so on attempt 1
// and returns {text} on later attempts; "finish" returns {text} after
// 1.5 s whatever happens. It writes "EXITED" after a clean stop. args are
// the NATS URL, and optionally the drain grace in milliseconds and the
// agent version (default "1"). Its twin is the TypeScript worker's
// sdk/typescript/test/support/hanging-worker.js.
func GoWorker(args []string, stdout io.Writer) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: goworker <nats url> [drain grace ms] [version]")
	}
	var grace time.Duration
	if len(args) > 1 {
		ms, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("drain grace %q: %w", args[1], err)
		}
		grace = time.Duration(ms) * time.Millisecond
	}
	version := "1"
	if len(args) > 2 && args[2] != "" {
		version = args[2]
	}
	nc, err := nats.Connect(args[0])
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	w := worker.New(nc, js, worker.WithID(fmt.Sprintf("go-worker-%d", os.Getpid())), worker.WithDrainGrace(grace))
	var out sync.Mutex
	for _, tool := range []string{"echo", "slow", "settle", "replay", "guarded"} {
		w.Handle(api.Queue{Agent: AgentName, Version: version, Tool: tool}, func(ctx context.Context, t api.Task, _ worker.Settler) worker.Result {
			out.Lock()
			fmt.Fprintf(stdout, "STARTED %s %d\n", t.Run, t.Attempt)
			out.Unlock()
			var in In
			if err := json.Unmarshal(t.Arguments, &in); err != nil {
				return worker.Result{Outcome: api.OutcomeExplain, Message: err.Error()}
			}
			switch {
			case in.Mode == "hang", in.Mode == "hang-first" && t.Attempt == 1:
				<-ctx.Done()
				return worker.Result{Outcome: api.OutcomeUncertain, Evidence: context.Cause(ctx).Error()}
			case in.Mode == "finish":
				time.Sleep(1500 * time.Millisecond)
			}
			b, err := json.Marshal(Out{Text: in.Text})
			if err != nil {
				return worker.Result{Outcome: api.OutcomeUncertain, Evidence: err.Error()}
			}
			return worker.Result{Outcome: api.OutcomeOutput, Content: b}
		})
	}
	if err := w.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "EXITED")
	return nil
}
