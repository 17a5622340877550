package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/internal/bench/scale"
)

// scaleCommand is `weft scale`: the scale test (package internal/bench/scale,
// docs/scaling.md, docs/adr/0021-scale-harness.md). Its subprocesses
// (nats-server nodes and
// runners) are this program started again with scale.EnvChild set; main
// runs them before anything else.
func scaleCommand() command {
	return command{
		name: "scale", summary: "put many runs in the log and measure runners, takeover, queries and a 3-node cluster against an empty log and one node (docs/scaling.md)",
		examples: []string{
			"weft scale --quick                          # 20,000 runs, short windows (a few minutes)",
			"nice -n 10 weft scale                      # 1,000,000 runs, 64 partitions, 3 nodes",
			"weft scale --runs 200000 --nodes 1 --idle 30s",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var cfg scale.Config
			fs.IntVar(&cfg.Runs, "runs", 0, "runs loaded into the one-node log (default 1000000; 20000 with --quick)")
			fs.IntVar(&cfg.ClusterRuns, "cluster-runs", 0, "runs loaded into the cluster's log (default --runs with --quick, else 100000)")
			fs.IntVar(&cfg.Partitions, "partitions", 64, "partitions of every runner")
			fs.IntVar(&cfg.Nodes, "nodes", 3, "1 (one-node measures only) or 3 (also a 3-node cluster at R3 with three runners)")
			fs.BoolVar(&cfg.Quick, "quick", false, "20,000 runs and short windows")
			fs.DurationVar(&cfg.Idle, "idle", 0, "how long each idle runner is watched for RSS and CPU (default 1m; 3s with --quick)")
			fs.DurationVar(&cfg.Workload, "workload", 0, "how long the steady workload runs (default 20s; 3s with --quick)")
			fs.DurationVar(&cfg.Quiet, "quiet", 0, "how long to wait for the cluster runners' start-up work to end before the workload (default 5m; 30s with --quick)")
			fs.IntVar(&cfg.Clients, "clients", 16, "clients of the steady workload")
			fs.IntVar(&cfg.Sample, "sample", 20, "runs of the killed runner approved after the kill")
			fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the sample")
			fs.StringVar(&cfg.Dir, "dir", "", "directory for the servers' stores and the subprocess logs (default: a temporary one, removed)")
			fs.BoolVar(&cfg.NoQuery, "no-query", false, "skip the query measures (the read-model rebuild is the longest step at a million runs)")
			fs.BoolVar(&cfg.QueryOnly, "query-only", false, "load the one-node log and measure the query service alone")
			fs.DurationVar(&cfg.Lease, "lease", 0, "liveness lease of every runner (default 2s)")
			out := fs.String("out", "", "also write the report as JSON to this file")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				if cfg.Nodes != 1 && cfg.Nodes != 3 {
					return usagef("--nodes %d: want 1 or 3", cfg.Nodes)
				}
				cfg.Progress = e.stderr
				cfg.Exec = func() (string, []string) { p, _ := os.Executable(); return p, nil }
				t0 := time.Now()
				res, err := scale.Run(ctx, cfg)
				if res == nil {
					return err
				}
				if werr := bench.WriteTable(e.stdout, res.Report); werr != nil {
					return werr
				}
				if *out != "" {
					f, ferr := os.Create(*out)
					if ferr != nil {
						return ferr
					}
					if werr := bench.WriteJSON(f, res.Report); werr != nil {
						f.Close()
						return werr
					}
					if cerr := f.Close(); cerr != nil {
						return cerr
					}
					fmt.Fprintf(e.stderr, "wrote %s (%s)\n", *out, time.Since(t0).Round(time.Second))
				}
				if err == nil && len(res.Report.Errors) > 0 {
					err = fmt.Errorf("scale: %d measure(s) failed (see the table)", len(res.Report.Errors))
				}
				return err
			}
		},
	}
}
