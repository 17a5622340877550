package loopport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsAreBelowTheEphemeralRange: the nodes' ports are picked
// outside the kernel's ephemeral range, so that while a killed node is
// down no outgoing connection or other test's "port 0" can take its port
// (a node that cannot come back, and clients that reconnect to another
// test's server: Free). Each port is distinct and bindable.
func TestPortsAreBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	below := lo-10000 >= 1000 // else freePorts falls back to port 0
	ports, err := Free(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if below && (p < 10000 || p >= lo) {
			t.Errorf("port %d is not in [10000, %d)", p, lo)
		}
		if seen[p] {
			t.Errorf("port %d picked twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}

// Each server a test or harness starts gets its own token: two tokens
// alike would let a client of one server work against the other on its
// port (the failure Token prevents).
func TestTokensDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := Token()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 32 || seen[tok] {
			t.Fatalf("token %q: want 32 hex digits, each new", tok)
		}
		seen[tok] = true
	}
}
