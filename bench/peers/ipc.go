package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"
)

// envEcho makes this program a byte echo (echoMain): the other end of
// ipcRoundTrip.
const envEcho = "WEFT_PEERS_ECHO"

// echoMain copies stdin to stdout a byte at a time until stdin ends.
func echoMain() {
	b := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(b); err != nil {
			return
		}
		if _, err := os.Stdout.Write(b); err != nil {
			return
		}
	}
}

// ipcRoundTrip is what a round trip between two processes costs on this
// machine now: n one-byte messages through pipes to an echo process and
// back, one at a time; it returns the p50 round trip and the CPU of both
// processes per round trip. The peers' runs cross processes many times (a
// DBOS run is 32 statements to PostgreSQL's backends, a Restate run some
// ten messages between the server and the SDK): where a context switch is
// dear (a virtual machine whose kernel asks the hypervisor for it), their
// CPU per run follows this figure, Weft's embedded server's does not.
func ipcRoundTrip(n int) (p50, cpu time.Duration, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envEcho+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	b := []byte{1}
	trip := func() error {
		if _, err := in.Write(b); err != nil {
			return err
		}
		_, err := io.ReadFull(out, b)
		return err
	}
	for range 100 { // the echo process started and warm
		if err := trip(); err != nil {
			return 0, 0, err
		}
	}
	lat := make([]time.Duration, 0, n)
	cpu0 := cpuOf([]int{cmd.Process.Pid})
	for range n {
		t0 := time.Now()
		if err := trip(); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	cpu = (cpuOf([]int{cmd.Process.Pid}) - cpu0) / time.Duration(n)
	slices.Sort(lat)
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("no round trip")
	}
	return pct(lat, 50), cpu, nil
}
