package runner_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ownershipTestFiles are the test files of partition ownership (leases,
// liveness judgement, the runners view, releases, rebalancing) besides
// those that use the fake ownership clock (usesOwnClock) and those of
// runner/internal/ownership, which are all checked.
var ownershipTestFiles = []string{
	"drainhandover_test.go", "drivercreate_test.go", "drivermarker_test.go", "harness_test.go",
	"idle_test.go", "lease_test.go", "leaselost_test.go", "liveness_test.go", "ownership_test.go",
	"partitions_test.go", "readyadvance_test.go", "rebuildsign_test.go", "semantics8_availability_test.go",
	"semantics8_closing_test.go", "semantics8_release_test.go", "semantics8_releaserace_test.go",
	"stale_test.go", "takeoverconflict_test.go", "takeoverstranded_test.go", "tworunners_test.go",
}

// wallClockMark is what a sleep of an ownership test says, on its line or
// the line above, when it waits on something ownership's clock does not
// move: the server's time (a KV TTL, a marker's expiry), the runner's
// work, a poll of a condition with a deadline.
const wallClockMark = "// wall clock:"

// The ownership tests run on the fake ownership clock (ownClock,
// runner.WithOwnershipClock), not on sleeps: a lease, a beat, a
// judgement's grace, a release or a round passes by a step of the clock.
// A time.Sleep left in an ownership test file (ownershipTestFiles, every
// runner test file that uses the fake clock, every test file of
// runner/internal/ownership) waits on the wall clock for something else,
// and says what ("// wall clock: <why>" on its line or the line above).
func TestOwnershipTestsSleepOnlyWithAReason(t *testing.T) {
	t.Parallel()
	var files []string
	runnerTests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range runnerTests {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ownershipTestFiles, f) || usesOwnClock(string(src)) {
			files = append(files, f)
		}
	}
	for _, f := range ownershipTestFiles {
		if !slices.Contains(runnerTests, f) {
			t.Errorf("ownershipTestFiles names %s, which is gone: drop it", f)
		}
	}
	internal, err := filepath.Glob(filepath.Join("internal", "ownership", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(internal) == 0 {
		t.Fatal("no test file found in internal/ownership")
	}
	files = append(files, internal...)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bare, err := sleepsWithoutReason(f, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bare {
			t.Errorf("%s:%d: a time.Sleep in an ownership test: step the ownership clock (ownClock) instead, or say why it waits on the wall clock (%q on its line or the line above)", f, line, wallClockMark+" <why>")
		}
	}
}

// usesOwnClock reports whether a runner test file's source uses the fake
// ownership clock.
func usesOwnClock(src string) bool {
	return strings.Contains(src, "newOwnClock(") || strings.Contains(src, "runner.WithOwnershipClock(")
}

// sleepsWithoutReason returns the lines of the calls of time.Sleep in the
// Go source src (named name) without wallClockMark on their line or the
// line above.
func sleepsWithoutReason(name string, src []byte) ([]int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	marked := map[int]bool{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, wallClockMark) {
				marked[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	var bare []int
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "time" {
			return true
		}
		if line := fset.Position(call.Pos()).Line; !marked[line] && !marked[line-1] {
			bare = append(bare, line)
		}
		return true
	})
	return bare, nil
}

// The guard above finds a sleep without its reason — on its own, in a
// loop's post statement — and accepts one with it on its line or the line
// above, not two lines above.
func TestOwnershipTestsSleepOnlyWithAReason_FindsABareSleep(t *testing.T) {
	t.Parallel()
	src := `package p

import "time"

func f() {
	time.Sleep(time.Millisecond)
	time.Sleep(time.Millisecond) // wall clock: the server's TTL
	// wall clock: a poll
	time.Sleep(time.Millisecond)
	// wall clock: two lines above
	// is not the line above
	time.Sleep(time.Millisecond)
	for ; ; time.Sleep(time.Millisecond) {
	}
	// time.Sleep in a comment is no call
}
`
	bare, err := sleepsWithoutReason("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{6, 12, 13}; !slices.Equal(bare, want) {
		t.Fatalf("bare sleeps at lines %v, want %v", bare, want)
	}
}
