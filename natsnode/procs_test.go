package natsnode_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/weftrun/weft/natsnode"
)

const procsChild = "WEFT_TEST_PROCS_CHILD"

// TestEmbeddedProcsDoublesTheRuntimesChoiceUnlessGOMAXPROCSIsSet
// (docs/adr/0042-procs-for-an-embedded-server.md): a process that embeds
// the server runs with twice the Ps the runtime chose, once however often
// it is asked, and with exactly what GOMAXPROCS says when the variable is
// set. Each case is a fresh process of this test binary: the variable is
// read when the runtime starts.
func TestEmbeddedProcsDoublesTheRuntimesChoiceUnlessGOMAXPROCSIsSet(t *testing.T) {
	if os.Getenv(procsChild) != "" {
		before := runtime.GOMAXPROCS(0)
		first := natsnode.EmbeddedProcs()
		second := natsnode.EmbeddedProcs()
		fmt.Printf("procs %d %d %d %d\n", before, first, second, runtime.GOMAXPROCS(0))
		return
	}
	child := func(env ...string) (before, first, second, now int) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedProcsDoublesTheRuntimesChoiceUnlessGOMAXPROCSIsSet$", "-test.count=1")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, natsnode.EnvProcs+"=") }), procsChild+"=1")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if _, err := fmt.Sscanf(line, "procs %d %d %d %d", &before, &first, &second, &now); err == nil {
				return
			}
		}
		t.Fatalf("child printed no procs line:\n%s", out)
		return
	}
	before, first, second, now := child()
	if want := natsnode.ProcsFor(before); first != want || second != want || now != want {
		t.Errorf("unset: the runtime chose %d; EmbeddedProcs gave %d, then %d, GOMAXPROCS %d; want %d each time", before, first, second, now, want)
	}
	before, first, second, now = child(natsnode.EnvProcs + "=3")
	if before != 3 || first != 3 || second != 3 || now != 3 {
		t.Errorf("GOMAXPROCS=3: %d, %d, %d, %d; want 3 each", before, first, second, now)
	}
}
