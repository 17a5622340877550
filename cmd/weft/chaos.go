package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/chaos"
	"github.com/weftrun/weft/natsnode"
)

// chaosCommand is `weft chaos`: the seeded fault-injection harness
// (package internal/chaos, docs/reliability.md). The harness starts its parts as
// `weft chaos` processes with chaos.EnvRole set; such a process runs its
// part and exits with its code.
func chaosCommand() command {
	return command{
		name: "chaos", summary: "run the seeded fault-injection harness (real processes on loopback) and check every promise",
		examples: []string{
			"weft chaos                                   # seed 1, 24 runs, 20 s of faults",
			"weft chaos --seeds 1,2,3 --sync-interval 2m  # three seeds, the non-durable mode (fsync every 2 min)",
			"weft chaos --seed 7 --runs 1500 --duration 10m --fault-every 300ms",
			"weft chaos --nodes 3 --seeds 1,2             # a 3-node cluster, everything at R3",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			seed := fs.Uint64("seed", 1, "the seed (workload and fault schedule)")
			seeds := fs.String("seeds", "", "comma-separated seeds, run one after the other (instead of --seed)")
			var cfg chaos.Config
			fs.IntVar(&cfg.Runs, "runs", 24, "runs per seed")
			fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "fault phase per seed")
			fs.DurationVar(&cfg.FaultEvery, "fault-every", 400*time.Millisecond, "mean time between faults")
			fs.DurationVar(&cfg.Quiet, "quiet", 3*time.Minute, "how long the quiet phase may take for every run to finish")
			fs.IntVar(&cfg.Runners, "runners", 3, "runner processes")
			fs.IntVar(&cfg.Workers, "workers", 2, "standalone worker processes")
			fs.IntVar(&cfg.Nodes, "nodes", 1, "nats-server nodes: 1, or 3 for a cluster with every asset at R3")
			sync := fs.String("sync-interval", natsnode.SyncAlways, "the servers' sync_interval: always (an fsync before every acknowledgement) or an interval such as 2m (not durable against a power loss)")
			fs.BoolVar(&cfg.StableIDs, "stable-ids", false, "restarted runners keep their id (default: a new id per process start)")
			fs.StringVar(&cfg.Dir, "dir", "", "working directory, empty or new (default: a temporary one, kept when a check fails); with --seeds, one subdirectory seed-N per seed")
			fs.BoolVar(&cfg.Keep, "keep", false, "keep the working directory")
			fs.StringVar(&cfg.TypeScript, "typescript", "", "the directory of the TypeScript SDK (sdk/typescript, with node_modules): its worker serves the tool ship, writing the same ledger (docs/typescript.md)")
			verbose := fs.Bool("v", false, "print every fault as it is injected")
			return func(ctx context.Context, e *env, args []string) error {
				if handled, code := chaos.RoleMain(); handled {
					os.Exit(code)
				}
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				always, every, err := natsnode.ParseSyncInterval(*sync)
				if err != nil {
					return usagef("--sync-interval: %v", err)
				}
				if !always {
					cfg.SyncInterval = every
				}
				list := []uint64{*seed}
				if *seeds != "" {
					list = nil
					for _, s := range strings.Split(*seeds, ",") {
						n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
						if err != nil {
							return usagef("--seeds: %q is not a seed", s)
						}
						list = append(list, n)
					}
				}
				if cfg.TypeScript != "" {
					abs, err := filepath.Abs(cfg.TypeScript)
					if err != nil {
						return usagef("--typescript %s: %v", cfg.TypeScript, err)
					}
					cfg.TypeScript = abs
				}
				cfg.Args = []string{"chaos"}
				if *verbose {
					cfg.Log = e.stderr
				}
				var (
					failed []string
					all    []*chaos.Result
				)
				dir := cfg.Dir
				for _, s := range list {
					cfg.Seed = s
					if dir != "" && len(list) > 1 {
						// One directory per seed: each seed has a server
						// store and a ledger of its own.
						cfg.Dir = filepath.Join(dir, fmt.Sprintf("seed-%d", s))
					}
					res, err := chaos.Run(ctx, cfg)
					if err != nil {
						return err
					}
					res.Write(e.stdout)
					all = append(all, res)
					if len(res.Violations) > 0 {
						failed = append(failed, strconv.FormatUint(s, 10))
					}
				}
				if len(all) > 1 {
					chaos.WriteTotal(e.stdout, all)
				}
				if len(failed) > 0 {
					return auditError{fmt.Sprintf("chaos: violations with seed(s) %s", strings.Join(failed, ","))}
				}
				return nil
			}
		},
	}
}
