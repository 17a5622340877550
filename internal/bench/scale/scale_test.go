package scale

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The harness's subprocesses (nats-server nodes, runners) are this
	// test binary started again with EnvChild set.
	if child, err := Child(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ciRuns is the CI version's log: about 20,000 runs on 3 nodes
// (docs/scaling.md).
const ciRuns = 20_000

// rssRatio bounds the RSS of a runner with ciRuns runs in the log against
// the same runner on the empty log, measured in the same test.
const rssRatio = 1.5

// TestIssue17ScaleTwentyThousandRunsOnThreeNodes is the CI version of the
// scale test: 20,000 runs loaded into a 3-node cluster
// (nats-server subprocesses routed on loopback, every asset R3), then
// three runner subprocesses. Each subtest names the property it checks;
// none times anything.
func TestIssue17ScaleTwentyThousandRunsOnThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("the scale test starts 3 nats-servers and 4 runners (about a minute)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Config{Runs: ciRuns, ClusterRuns: ciRuns, Nodes: 3, Quick: true, NoOneNode: true, NoQuery: true,
		Idle: 2 * time.Second, Workload: 2 * time.Second, Quiet: 10 * time.Second, Clients: 8, Sample: 12, Seed: 17, Dir: t.TempDir(),
		Progress: testWriter{t}, Exec: func() (string, []string) { return exe, []string{"-test.run=^$"} }})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Report.Errors {
		t.Errorf("measure failed: %s", e)
	}
	f := res.Facts

	t.Run("partitions are owned once each by the three runners", func(t *testing.T) {
		if !partitionsLanded {
			t.Log("not checked: runner.WithPartitions has not landed (partitionsLanded false)")
			return
		}
		if !f.Partitioned {
			t.Fatal("the runners own no partitions")
		}
		checkOwnedOnce(t, f.Owners, 64)
	})
	t.Run("a SIGKILLed runner's partitions are owned again by the others", func(t *testing.T) {
		if !partitionsLanded {
			t.Log("not checked: runner.WithPartitions has not landed (partitionsLanded false)")
			return
		}
		checkOwnedOnce(t, f.OwnersAfterKill, 64)
		for p, o := range f.OwnersAfterKill {
			if slices.Contains(o, f.Killed) {
				t.Errorf("partition %d still owned by the killed runner %s", p, f.Killed)
			}
		}
	})
	t.Run("a fixed-seed sample of the killed runner's runs is approved and completes", func(t *testing.T) {
		if len(f.Sample) == 0 || f.SampleDone != len(f.Sample) {
			t.Fatalf("%d of %d sampled runs completed (%v)", f.SampleDone, len(f.Sample), f.Sample)
		}
	})
	t.Run("idle runs stay out of memory and get no takeover append", func(t *testing.T) {
		if len(f.ClusterIdle) != 3 {
			t.Fatalf("stats of %d runners", len(f.ClusterIdle))
		}
		for id, st := range f.ClusterIdle {
			if st.Driven != 0 {
				t.Errorf("runner %s holds %d runs in memory with nothing to do", id, st.Driven)
			}
		}
		if f.IdleChecked < 200 || f.IdleRecovered != 0 {
			t.Errorf("%d of %d idle loaded runs read back have a run_recovered event", f.IdleRecovered, f.IdleChecked)
		}
		// Only the active runs (one in 100) are taken over: by the first
		// runner, which owned every partition alone, and again (handed
		// off) by a joiner when one was still in flight as it joined.
		active, taken := ciRuns/100, uint64(0)
		for _, st := range f.ClusterIdle {
			taken += st.TakenOver
		}
		if taken > uint64(2*active) {
			t.Errorf("%d takeovers for %d active runs", taken, active)
		}
	})
	t.Run("a runner's goroutines do not grow with the runs in the log", func(t *testing.T) {
		if f.Empty.Goroutines == 0 || f.Loaded.Goroutines > f.Empty.Goroutines+10 {
			t.Fatalf("%d goroutines with %d runs in the log, %d on the empty log", f.Loaded.Goroutines, ciRuns, f.Empty.Goroutines)
		}
	})
	t.Run("a runner's RSS with the runs in the log stays within 1.5x of the empty log's", func(t *testing.T) {
		t.Logf("RSS %d KiB with %d runs, %d KiB on the empty log (×%.2f); CPU over the idle window %s and %s",
			f.Loaded.RSS>>10, ciRuns, f.Empty.RSS>>10, float64(f.Loaded.RSS)/float64(f.Empty.RSS), f.Loaded.CPU, f.Empty.CPU)
		if !partitionsLanded {
			// A runner of this build reads every unfinished run at
			// start-up (rebuildDrivers): its memory follows the log until
			// partitions keep idle runs out of it.
			t.Log("not checked: runner.WithPartitions has not landed (partitionsLanded false)")
			return
		}
		if f.Empty.RSS == 0 || float64(f.Loaded.RSS) > rssRatio*float64(f.Empty.RSS) {
			t.Fatalf("RSS %d KiB with %d runs against %d KiB on the empty log: over ×%.1f", f.Loaded.RSS>>10, ciRuns, f.Empty.RSS>>10, rssRatio)
		}
	})
}

func checkOwnedOnce(t *testing.T, owners map[int][]string, p int) {
	t.Helper()
	for i := range p {
		if o := owners[i]; len(o) != 1 {
			t.Errorf("partition %d owned by %v", i, o)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", b)
	return len(b), nil
}
