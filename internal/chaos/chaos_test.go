package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/chaos"
)

// The long harness: go test ./internal/chaos -run TestChaos -chaos.seeds 1,2,3
// -chaos.duration 2m -chaos.runs 200 (docs/reliability.md).
var (
	seeds    = flag.String("chaos.seeds", "", "comma-separated seeds to run instead of the short set")
	duration = flag.Duration("chaos.duration", 0, "fault phase per seed (default: the short set's)")
	runs     = flag.Int("chaos.runs", 0, "runs per seed (default: the short set's)")
	keep     = flag.Bool("chaos.keep", false, "keep the working directories")
	verbose  = flag.Bool("chaos.v", false, "print the harness's progress")
)

func TestMain(m *testing.M) {
	if handled, code := chaos.RoleMain(); handled {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// runSeeds runs cfg with each seed, each a subtest ("seed_1") that runs
// beside the package's other seeds (t.Parallel): every seed has its own
// processes, ports and working directory, and spends its time waiting on
// its schedule and its runs, not on the CPU. -test.parallel bounds how
// many run at once (GOMAXPROCS by default, 4 in the test task).
func runSeeds(t *testing.T, cfg chaos.Config, list []uint64) {
	t.Parallel()
	for _, s := range list {
		cfg := cfg
		cfg.Seed = s
		t.Run(fmt.Sprint("seed ", s), func(t *testing.T) {
			t.Parallel()
			runSeed(t, cfg)
		})
	}
}

func runSeed(t *testing.T, cfg chaos.Config) {
	t.Helper()
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *runs > 0 {
		cfg.Runs = *runs
	}
	cfg.Keep = *keep
	if *verbose {
		cfg.Log = os.Stderr
	}
	// The test binary is the parts' executable; -test.run=^$ keeps a part
	// from running tests if RoleMain were ever skipped.
	cfg.Args = []string{"-test.run=^$"}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+cfg.Quiet+5*time.Minute)
	defer cancel()
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Write(&b)
	t.Log("\n" + b.String())
	if len(res.Violations) > 0 {
		t.Errorf("%d violation(s) with seed %d", len(res.Violations), cfg.Seed)
	}
}

// short is the default suite's setting per seed: about 40 s each on the
// reference 2-core machine.
var short = chaos.Config{Duration: 15 * time.Second, Runs: 20, Quiet: 2 * time.Minute}

// seedList is -chaos.seeds, or def.
func seedList(t *testing.T, def ...uint64) []uint64 {
	if *seeds == "" {
		return def
	}
	var list []uint64
	for _, s := range strings.Split(*seeds, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("-chaos.seeds: %v", err)
		}
		list = append(list, n)
	}
	return list
}

// TestChaos runs the harness (docs/reliability.md) on a single nats-server
// in the default durability (sync_interval: always, an fsync before every
// acknowledgement): every check of the package doc, seeds 1 and 2.
func TestChaos(t *testing.T) {
	runSeeds(t, short, seedList(t, 1, 2))
}

// TestChaosSyncInterval is the same harness in the non-durable mode
// (sync_interval: 2m, nats-server's own default): the faults it injects
// kill processes, not the machine, so every check holds there too.
func TestChaosSyncInterval(t *testing.T) {
	cfg := short
	cfg.SyncInterval = 2 * time.Minute
	runSeeds(t, cfg, seedList(t, 3))
}

// TestChaosCluster runs the harness on a 3-node cluster with every
// stream and bucket at R3; the stream leader is killed a third of the way
// in and a second node two thirds of the way, besides the random faults.
func TestChaosCluster(t *testing.T) {
	cfg := short
	cfg.Nodes, cfg.Duration = 3, 20*time.Second
	runSeeds(t, cfg, seedList(t, 1))
}

// TestChaosTypeScript is the chaos seed of the TypeScript worker (docs/typescript.md):
// the tool ship is served by the TypeScript worker (sdk/typescript, a
// Node process the schedule kills, stops and pauses like the Go workers),
// whose bodies write the same ledger; zero violations. It needs Node.js
// and the SDK's dependencies (go tool -modfile=devtools/go.mod task
// sdk-ts-deps): without them it fails, never skips.
func TestChaosTypeScript(t *testing.T) {
	cfg := short
	cfg.TypeScript = "../../sdk/typescript"
	runSeeds(t, cfg, seedList(t, 4))
}

// TestRunRefusesAUsedDirectory: the checks read the working directory's
// ledger and server store as the run's own, so a directory that holds an
// earlier run's is refused before anything starts. (A long run with one
// --dir for six seeds checked every seed against the ledger of all the
// earlier ones and its server's old streams: body starts were summed over
// the seeds and one seed counted no takeover.)
func TestRunRefusesAUsedDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/ledger", []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := chaos.Run(context.Background(), chaos.Config{Seed: 1, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Run with a used directory: %v, %v; want a refusal naming it not empty", res, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the refused run left %d entries in its directory, want the 1 it found", len(entries))
	}
}

// TestRunThatCannotRunRemovesItsDirectory: the harness keeps its
// temporary working directory only for a violation, printing where
// (docs/reliability.md, "a run with a violation keeps its working
// directory ... and prints where"); a harness that could not run (here
// its context is over before the nodes answer) removes it, as a clean run
// does, and leaves nothing in the temporary directory.
func TestRunThatCannotRunRemovesItsDirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := chaos.Run(ctx, chaos.Config{Seed: 1, Args: []string{"-test.run=^$"}})
	if err == nil {
		t.Fatalf("Run with a context that is over: %v, no error", res)
	}
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		t.Errorf("the run (%v) left %s in the temporary directory", err, e.Name())
	}
}
