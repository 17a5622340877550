package runner_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running once they all ended: every goroutine of
// the package is owned by something a test stops.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
