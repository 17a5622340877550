// Package loopport picks loopback ports for servers that tests and
// harnesses start as processes and restart on the same port, and the
// token each such server requires (Token), so that a client of one never
// works against another that took its port.
package loopport

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// Free picks n loopback ports that are free now, outside the
// kernel's ephemeral range (ip_local_port_range) when there is room below
// it. A node keeps its port across restarts, so while a killed node is
// down its port is free: a port from the ephemeral range could then be
// handed to another process's outgoing connection or to another test's
// "port 0" — its node then cannot come back, and worse, the harness's
// clients reconnect to the other test's server (CI once saw two chaos
// tests run in parallel share 127.0.0.1:37741: starts answered ok by the
// other test's runners, "acknowledged_command_lost" in both). Below the
// range only another test that picks ports this way could take it, at
// random among thousands, and only while it is free.
func Free(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	lo := ephemeralLow()
	const floor = 10000
	for tries := 0; len(ports) < n && lo-floor >= 1000 && tries < 1000; tries++ {
		p := floor + rand.IntN(lo-floor)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use, or taken by one picked already
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the low end of the kernel's ephemeral port range
// (Linux's /proc/sys/net/ipv4/ip_local_port_range; 32768 elsewhere, or
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= 0 {
		return 32768
	}
	return lo
}

// Token returns a new random token (16 bytes, hex) for a server a test
// or a harness starts: the server requires it and its clients' URLs carry
// it, so a client that reaches another server on its server's port (one
// that took the port while its own was down) is refused there.
func Token() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
