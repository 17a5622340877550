package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running once they all ended: every goroutine of
// the package is owned by something a test stops.
//
// The package's tests run side by side (t.Parallel; the test task gives
// -parallel 4): each has its own nats-server. The test that reads every
// goroutine of the process (TestSemantics8_RunWaitsForALateSettlement,
// workerGoroutines) is not parallel: it runs alone, before the others.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
