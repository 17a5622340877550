// Command weft is the command-line client of Weft: it lists and shows runs,
// prints their timelines, answers approvals, reconciles uncertain effects,
// starts and cancels runs, exports and verifies a run's audit trail,
// rebuilds the read models and runs the payment-desk demo (weft dev).
//
// Run `weft --help` for the commands, their examples and the exit codes
// (also in docs/cli.md).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/internal/bench/scale"
	"github.com/weftrun/weft/natsnode"
)

// self is how the commands weft prints as hints (show's approve,
// reconcile and resolve lines) call weft: "weft" when the weft on the PATH
// is this binary, "go run -tags … ./cmd/weft" when go run started it in a
// checkout, else this binary's path (weftCommand, as weft dev's printed
// steps). Tests that call run directly see "weft".
var self = "weft"

// raiseProcs is natsnode.EmbeddedProcs in the weft program (main sets it)
// and nothing in tests, which run the commands in their own process: the
// commands that embed the server (dev, bench) call it first
// (docs/adr/0042-procs-for-an-embedded-server.md).
var raiseProcs func() int

// embedding calls raiseProcs, when set, for a command about to embed the
// server.
func embedding() {
	if raiseProcs != nil {
		raiseProcs()
	}
}

func main() {
	// A subprocess of weft bench (a runner it may SIGKILL) runs as such.
	if child, err := bench.Child(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, "weft bench child:", err)
			os.Exit(1)
		}
		return
	}
	// So does a subprocess of weft scale (a nats-server node or a runner).
	if child, err := scale.Child(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, "weft scale child:", err)
			os.Exit(1)
		}
		return
	}
	self, _ = weftCommand()
	raiseProcs = natsnode.EmbeddedProcs
	ctx, stop := natsnode.NotifyShutdown(context.Background())
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := exitCode(err)
		if code != exitOK {
			fmt.Fprintln(os.Stderr, "weft:", err)
		}
		os.Exit(code)
	}
}
