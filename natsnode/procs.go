package natsnode

import (
	"os"
	"runtime"
	"sync"
)

// EnvProcs is the Go runtime's own variable: when it is set, EmbeddedProcs
// leaves GOMAXPROCS as the runtime set it from it.
const EnvProcs = "GOMAXPROCS"

var embeddedProcs = sync.OnceValue(func() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv(EnvProcs) != "" {
		return n
	}
	runtime.GOMAXPROCS(ProcsFor(n))
	return runtime.GOMAXPROCS(0)
})

// ProcsFor is the GOMAXPROCS EmbeddedProcs sets in a process whose runtime
// chose n (the CPUs it may use): twice as many.
func ProcsFor(n int) int { return 2 * max(n, 1) }

// EmbeddedProcs raises GOMAXPROCS, once per process, to ProcsFor of the
// runtime's choice (the CPUs the process may use, its cgroup's limit
// included), unless the GOMAXPROCS variable is set; it returns the value
// in effect. A process that embeds the server and serves runs with it —
// `weft dev`, `weft bench`, an application that embeds both — calls it
// before it starts the server: with sync_interval: always each stream's
// writer goroutine spends half its time in fsync, and a goroutine in a
// system call keeps its P until the runtime's monitor takes it back, so
// with one P per CPU the runner, the worker and the other streams'
// writers wait for a P while the CPUs are idle. Measured in
// docs/adr/0042-procs-for-an-embedded-server.md: ×1.2 runs per second at 64
// clients at the same CPU per run. A process that connects to an external
// server does not need it (its writers are that server's).
func EmbeddedProcs() int { return embeddedProcs() }
