// Command tmpcheck is the test task's check that the tests leave nothing
// behind in the temporary directory (Taskfile.yml, task test): a test
// that builds a binary or starts a stack in a temporary directory it never
// removes fills a small disk after a few runs (127 MB a run for the
// console tests' weft binary, once).
//
//	tmpcheck new        prints the path of a fresh directory (in the
//	                    temporary directory, not made yet: task --dry
//	                    makes nothing); the task gives it to the suites
//	                    as TMPDIR
//	tmpcheck make DIR   makes it (and fails when it exists)
//	tmpcheck check DIR  lists what is left in DIR, with sizes, removes
//	                    DIR, and fails when anything but a documented
//	                    exception (kept) was left
//
// What is kept on purpose across runs does not live in the temporary
// directory: the first-hour test's Go caches and the console's
// screenshots are under the user's cache directory (e2e/ui/firsthour,
// e2e/ui/console). What a failed test keeps as evidence (kept, below) is
// moved out of DIR, not removed. TMPDIR is how Go, Node.js and Chromium find the
// temporary directory on Unix; elsewhere the suites do not see DIR and
// the check finds it empty.
package main

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// kept lists what a run may leave in the temporary directory on purpose
// (a name or a name's prefix ending in "*"), each with why it is not a
// leak. check moves such an entry out, into the temporary directory the
// task itself was given, and prints where, instead of removing it. Keep
// it short: an entry here hides a leak of that name.
var kept = map[string]string{
	"weft-chaos-*": "a chaos seed's working directory (stores, ledger, logs), kept only when a check failed (internal/chaos, Run), the test failing with it: the evidence of the violation (rm -r it when done)",
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "new":
		fmt.Println(filepath.Join(os.TempDir(), "weft-test-tmp-"+rand.Text()))
		return
	case len(os.Args) == 3 && os.Args[1] == "make":
		if err := os.Mkdir(os.Args[2], 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "tmpcheck:", err)
			os.Exit(1)
		}
		return
	case len(os.Args) != 3 || os.Args[1] != "check":
		fmt.Fprintln(os.Stderr, "usage: tmpcheck new | tmpcheck make DIR | tmpcheck check DIR")
		os.Exit(2)
	}
	left, err := check(os.Args[2], kept, os.TempDir())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tmpcheck:", err)
		os.Exit(1)
	}
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "tmpcheck: the tests left %d entr%s in their temporary directory (TMPDIR=%s, now removed); each is a temporary directory or file some test or helper never removed:\n",
			len(left), map[bool]string{true: "y", false: "ies"}[len(left) == 1], os.Args[2])
		for _, l := range left {
			fmt.Fprintf(os.Stderr, "  %s\n", l)
		}
		os.Exit(1)
	}
}

// check returns what DIR holds that kept does not name, one line each
// with its size ("name  12.3 MB"), and removes DIR; what kept names it
// moves into outside first, printing where. A DIR that is gone holds
// nothing.
func check(dir string, kept map[string]string, outside string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var left []string
	for _, e := range entries {
		if why := keptWhy(e.Name(), kept); why != "" {
			to := filepath.Join(outside, e.Name())
			if err := os.Rename(filepath.Join(dir, e.Name()), to); err == nil {
				fmt.Fprintf(os.Stderr, "tmpcheck: kept %s: %s\n", to, why)
				continue
			}
		}
		size, n := du(filepath.Join(dir, e.Name()))
		what := "file"
		if e.IsDir() {
			what = fmt.Sprintf("directory, %d files", n)
		}
		left = append(left, fmt.Sprintf("%-40s %9s (%s)", e.Name(), human(size), what))
	}
	sort.Strings(left)
	return left, remove(dir)
}

func keptWhy(name string, kept map[string]string) string {
	for k, why := range kept {
		if p, ok := strings.CutSuffix(k, "*"); (ok && strings.HasPrefix(name, p)) || name == k {
			return why
		}
	}
	return ""
}

// du is the size of path's regular files and how many there are.
func du(path string) (size int64, files int) {
	filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			size += info.Size()
			files++
		}
		return nil
	})
	return size, files
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// remove removes dir, making its directories writable first when it must
// (Go's module cache is read-only).
func remove(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
