package runner_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running once they all ended: every goroutine of
// the package is owned by something a test stops.
//
// The package's tests run side by side (t.Parallel; the test task gives
// -parallel 4): each has its own nats-server (natstest.Start) and spends
// its time waiting on it, on leases and on timeouts, not on the CPU. The
// tests that count or read the process's goroutines
// (TestPartitions_TakingOverIdleRunsCostsNothing,
// TestNothingOfTheRunnerOutlivesRun_TheNextDriverFinishesTheWork) are not
// parallel: they run alone, before the others.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
