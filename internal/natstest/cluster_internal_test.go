package natstest

import (
	"net"
	"testing"

	"github.com/nats-io/nats.go"
)

// A route port picked up front can be taken by someone else before its
// server listens on it (a loaded machine, a package's tests in parallel):
// that server never starts. StartCluster must notice it at once and start
// the cluster again on new ports, not wait for a readiness that cannot come
// and fail ("server 1 not ready").
func TestStartClusterStartsAgainWhenARoutePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, picks := pickPort, 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken.Addr().(*net.TCPAddr).Port, nil // server 1's route port, in use
		}
		return free()
	}
	defer func() { pickPort = free }()

	nc, err := nats.Connect(StartCluster(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if picks != 6 {
		t.Fatalf("%d route ports picked, want 6: the cluster started twice, the second time on new ports", picks)
	}
}
