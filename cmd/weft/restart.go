package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/proof"
)

// restartCommand is `weft restart RUN --from-turn N` (docs/semantics.md
// §14): a finished run restarted as a new run from the state before its
// model turn N.
func restartCommand() command {
	return command{
		name: "restart", args: "<run>", summary: "restart a finished run as a new run from the state before one of its model turns",
		examples: []string{
			`weft restart pay-7 --from-turn 3`,
			`weft restart pay-7 --from-turn 3 --run pay-7b --version 2`,
			`weft restart pay-7 --from-turn 3 --reason "tool fixed" --signing-key carol.nk   # verified (docs/security.md)`,
		},
		help: `The new run's log starts with the finished run's conversation up to that
turn (assistant turns and tool results as the model read them) and a record
of where it came from (forked_from: run, version, turn); the model is asked
that turn again. Effects recorded before the turn are not run again: their
results are in the transcript. --from-turn may be the run's last turn + 1
to continue after all of it.

Refused, nothing recorded: run_not_finished (the run is live), wrong_reference
(no such turn; a turn before the run's own fork point when it is itself a
restart: the message names the run to restart; calls before it that never
ran, ran but faulted, or delegated to a child that did not complete),
uncertain_actions (actions before the turn whose outcome nobody knows, a
child run's as <child>/<action>: reconcile them with weft reconcile --stored,
or resolve their open questions, first); invalid_request for a child run
(restart its root run); already_started when --run names a run that exists;
proof_refused or identity_required for who restarts it, as for a cancel.
The new run records who restarted it and why (--by, or --signing-key for
the key's person, verified: docs/security.md, "Who did it"); weft show and
weft audit verify name them. The new run counts only its own turns against
max turns.`,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var req api.RestartRequest
			fs.Int64Var(&req.From.Turn, "from-turn", 0, "the model turn to restart from (required): 1 up to the run's last turn + 1")
			fs.StringVar(&req.Run, "run", "", "the new run's id (1-128 of [A-Za-z0-9_-]); empty: one the CLI chooses (run- and 20 hex digits), printed")
			fs.StringVar(&req.Version, "version", "", "the version of the run's agent the new run is bound to (empty: the one the runners serve)")
			fs.StringVar(&req.Correlation, "correlation", "", "a correlation id for tracing")
			fs.StringVar(&req.Reason, "reason", "", "why")
			fs.StringVar(&req.By, "by", "", "who restarts (recorded unverified; --signing-key records the key's person, verified)")
			sign := addCommandSignFlags(fs)
			o := actFlags(fs, &req.CommandID)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				if req.From.Turn < 1 {
					return &weft.Error{Code: weft.CodeInvalidRequest, Message: "--from-turn " + strconv.FormatInt(req.From.Turn, 10) + ": give the model turn to restart from (1 or more; weft show " + args[0] + " prints its turns)"}
				}
				req.From.Run = args[0]
				// As for start: the CLI chooses the new run's id, so that a
				// restart whose outcome is not known names the run to read.
				// The proof states it too (proof.RestartSubject).
				if req.Run == "" {
					req.Run = newRunID()
				}
				var err error
				if req.Proof, err = signCommand(e.stderr, sign, proof.RestartSubject(req.From.Run, req.From.Turn, req.Run, req.Reason)); err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, req.Proof); done {
					return err
				}
				again := fmt.Sprintf(" and the same --run %s", req.Run)
				return send(ctx, e, &req.CommandID, o, runRef{run: req.Run, again: again}, func(ctx context.Context, c *client.Client, _ views) (api.Reply, error) {
					r, err := c.Restart(ctx, req)
					return api.Reply(r), err
				})
			}
		},
	}
}
