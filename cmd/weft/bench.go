package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/natsnode"
)

func benchCommand() command {
	return command{
		name: "bench", summary: "measure Weft on this machine, every figure beside a baseline of the same run (docs/benchmarks.md)",
		examples: []string{"weft bench --quick", "weft bench --out bench.json", "weft --nats nats://127.0.0.1:4222 bench --quick",
			"weft bench --only run,recovery", "weft bench --quick --sync-interval 2m   # the non-durable mode (fsync every 2 min)"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			quick := fs.Bool("quick", false, "measure everything briefly (under a minute)")
			out := fs.String("out", "", "also write the report as JSON to this file")
			syncInterval := fs.String("sync-interval", natsnode.SyncAlways, "the embedded server's sync_interval: always (fsync before every acknowledgement, runner with group commit) or an interval such as 2m (the non-durable mode)")
			fs.Bool("sync-always", true, "the default (sync_interval: always); kept for older command lines")
			noGroup := fs.Bool("no-group-commit", false, "with sync_interval always, run the runner without group commit (to measure what it gives)")
			idle := fs.Int("idle-runs", 0, "suspended runs for the idle-run measure (default 300 with --quick, else 20000)")
			only := fs.String("only", "", "comma-separated sections to run: log append, run, history, recovery, rebuild, idle runs (baselines always run)")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				always, every, err := natsnode.ParseSyncInterval(*syncInterval)
				if err != nil {
					return usagef("--sync-interval: %v", err)
				}
				if always {
					every = 0
				}
				cfg := bench.Config{Quick: *quick, SyncInterval: every, NoGroupCommit: *noGroup, IdleRuns: *idle, Progress: e.stderr,
					Exec: func() (string, []string) {
						p, _ := os.Executable()
						return p, []string{"bench"}
					}}
				if e.urlGiven {
					cfg.URL = e.url
				} else {
					embedding()
				}
				if *only != "" {
					for _, s := range strings.Split(*only, ",") {
						cfg.Only = append(cfg.Only, strings.TrimSpace(s))
					}
				}
				rep, err := bench.Run(ctx, cfg)
				if rep == nil {
					return err
				}
				if werr := bench.WriteTable(e.stdout, rep); werr != nil {
					return werr
				}
				if *out != "" {
					f, ferr := os.Create(*out)
					if ferr != nil {
						return ferr
					}
					if werr := bench.WriteJSON(f, rep); werr != nil {
						f.Close()
						return werr
					}
					if cerr := f.Close(); cerr != nil {
						return cerr
					}
					fmt.Fprintf(e.stderr, "wrote %s\n", *out)
				}
				if err == nil && len(rep.Errors) > 0 {
					err = fmt.Errorf("bench: %d measure(s) failed (see the table)", len(rep.Errors))
				}
				return err
			}
		},
	}
}
