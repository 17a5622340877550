package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/weftrun/weft/demo"
	"github.com/weftrun/weft/natsnode"
)

// listFlag is a repeatable (or comma-separated) string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

func devCommand() command {
	return command{
		name: "dev", summary: "run the payment-desk demo: embedded NATS, runner, worker, projector",
		examples: []string{
			"weft dev",
			"weft dev --listen 4222 --data /tmp/weft-dev   # then, elsewhere: export NATS_URL=nats://127.0.0.1:4222",
			"weft dev --nats nats://127.0.0.1:4222          # against an external nats-server -js",
			"weft dev --external-tool send_payment          # act as send_payment's worker yourself (docs/protocol/41-tasks.md)",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var o demo.Options
			fs.StringVar(&o.Listen, "listen", "4222", "loopback port (or host:port) of the embedded server; 0 picks a free one")
			fs.StringVar(&o.DataDir, "data", "", "the embedded server's store directory (default $WEFT_DATA, else the user's state dir)")
			verbose := fs.Bool("v", false, "log what the runtime does")
			var external listFlag
			fs.Var(&external, "external-tool", "leave this tool's tasks to workers outside the process, such as the nats CLI (repeatable)")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				if e.urlGiven {
					o.NATSURL = e.url
				}
				if o.DataDir == "" {
					o.DataDir = os.Getenv(natsnode.EnvData)
				}
				if err := checkExternal(external); err != nil {
					return err
				}
				o.ExternalTools = external
				o.Stdout = e.stdout
				level := slog.LevelWarn
				if *verbose {
					level = slog.LevelInfo
				}
				o.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
				return demo.Run(ctx, o)
			}
		},
	}
}

// checkExternal makes an --external-tool naming no demo tool a usage error
// (exit 2) rather than a failure of demo.Run.
func checkExternal(external []string) error {
	var names []string
	for _, t := range demo.Tools() {
		names = append(names, t.Name())
	}
	for _, x := range external {
		if !slices.Contains(names, x) {
			return usagef("--external-tool %s: the demo's tools are %s", x, strings.Join(names, ", "))
		}
	}
	return nil
}
