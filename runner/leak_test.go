package runner_test

import (
	"flag"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// parallel is how many of the package's tests run at once unless
// -test.parallel is given: they spend their time waiting on a server,
// leases and timeouts, not on the CPU, so more than GOMAXPROCS of them
// share the machine well. Each test has its own nats-server
// (natstest.Start); the tests that count or read the process's
// goroutines (TestPartitions_TakingOverIdleRunsCostsNothing,
// TestNothingOfTheRunnerOutlivesRun_TheNextDriverFinishesTheWork) are not
// parallel: they run alone, before the others.
const parallel = 4

// TestMain fails the package's tests when a goroutine they started is
// still running once they all ended: every goroutine of
// the package is owned by something a test stops.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
