package main

import (
	"context"
	"flag"

	weft "github.com/weftrun/weft"
)

// The commands that act on runs go through the command API (package api,
// docs/protocol/40-commands.md).

func notWired(what string) error {
	return &weft.Error{Code: weft.CodeUnavailable, Message: what + " is not wired yet: the command API client (package api) is not in this build"}
}

func startCommand() command {
	return command{
		name: "start", args: "<agent> <input>", summary: "start a run of an agent",
		examples: []string{`weft start payment-desk "pay invoice 42"`, `weft start payment-desk "pay invoice 42" --run pay-42 --version 1`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<agent> <input>"); err != nil {
					return err
				}
				return notWired("start")
			}
		},
	}
}

func approveCommand() command {
	return command{
		name: "approve", args: "<run> <action>", summary: "approve a pending approval request",
		examples: []string{"weft approve pay-42 1/call_1 --revision 1 --credential alice-token"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				return notWired("approve")
			}
		},
	}
}

func rejectCommand() command {
	return command{
		name: "reject", args: "<run> <action>", summary: "reject a pending approval request",
		examples: []string{`weft reject pay-42 1/call_1 --revision 1 --reason "not this month"`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				return notWired("reject")
			}
		},
	}
}

func reconcileCommand() command {
	return command{
		name: "reconcile", args: "<run> <action>", summary: "record what happened to an uncertain action",
		examples: []string{`weft reconcile pay-42 1/call_2 --output '{"paid":true}'`, `weft reconcile pay-42 1/call_2 --error "card declined"`, `weft reconcile pay-42 1/call_2 --unconfirmed "asked the bank"`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				return notWired("reconcile")
			}
		},
	}
}

func cancelCommand() command {
	return command{
		name: "cancel", args: "<run>", summary: "cancel a run",
		examples: []string{`weft cancel pay-42 --reason "duplicate"`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				return notWired("cancel")
			}
		},
	}
}

func settleCommand() command {
	return command{
		name: "settle", args: "<run> <action>", summary: "settle a settling tool's action",
		examples: []string{`weft settle pay-42 1/call_2 --output '{"paid":true}' --summary "bank confirmed"`},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 2, "<run> <action>"); err != nil {
					return err
				}
				return notWired("settle")
			}
		},
	}
}

func devCommand() command {
	return command{
		name: "dev", summary: "run the payment-desk demo on an embedded NATS server (runner, worker, projector)",
		examples: []string{"weft dev", "weft dev --listen 4222   # then: nats --server nats://127.0.0.1:4222 micro ls"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				return notWired("dev")
			}
		},
	}
}
