package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// internalRefusalLog is what a runner logs, at error level, when the
// decision core refused a decision the runtime derived itself (runner
// package, refusals.go): the runtime's own inconsistency.
const internalRefusalLog = "internal refusal: the decision core refused a decision the runtime derived"

// refusalRun finds the run of an internal refusal's log line.
var refusalRun = regexp.MustCompile(`\brun=(\S+)`)

// checkInternalRefusals reads the runners' logs once they stopped: every
// internal refusal a runner logged is a violation of run_not_answerable
// (docs/semantics.md §8, "A run can always be answered": the core never refuses
// a
// decision the runtime derived), even when a later retry moved the run on,
// so that a takeover refused for an expiry applied before it is caught
// whether or not a command of the workload met it.
func (h *harness) checkInternalRefusals() {
	files, _ := filepath.Glob(filepath.Join(h.dir, "logs", "runner-*.log"))
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		// One violation per run and log: its first line, and how many.
		first, count := map[string]string{}, map[string]int{}
		var runs []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, internalRefusalLog) {
				continue
			}
			run := ""
			if m := refusalRun.FindStringSubmatch(line); m != nil {
				run = m[1]
			}
			if count[run] == 0 {
				first[run] = line
				runs = append(runs, run)
			}
			count[run]++
		}
		f.Close()
		for _, run := range runs {
			h.violate(Violation{Check: checkNotAnswerable, Run: run, Detail: fmt.Sprintf("%s logged %d internal refusal(s), the first: %s", filepath.Base(name), count[run], first[run])})
		}
	}
}
