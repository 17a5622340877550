package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The TypeScript worker option (Config.TypeScript): the tool tsTool is
// served by TypeScript worker processes (sdk/typescript, docs/typescript.md)
// instead of the Go worker parts, with the body the Go parts run (its
// twin, sdk/typescript/test/support/chaos-worker.js, writes the same
// ledger lines with its worker's last looks). The schedule treats them as
// workers: SIGKILL, SIGTERM and SIGSTOP hit them as the Go ones.

// tsTool is the tool the TypeScript workers serve: the non-replayable
// effect, whose every start the checks count against a budget of one.
const tsTool = toolShip

// tsWorkers is how many TypeScript worker processes serve tsTool.
const tsWorkers = 1

// roleTSWorker is the role of a TypeScript worker part: the harness runs
// node on the script, not Config.Exe.
const roleTSWorker = "tsworker"

// envTSTool names the tool the TypeScript workers serve, for the Go worker
// parts (which then leave it alone) and the TypeScript ones.
const envTSTool = "WEFT_CHAOS_TS_TOOL"

// tsScript is the TypeScript worker part's script in the SDK's directory.
const tsScript = "test/support/chaos-worker.js"

// checkTypeScript makes Config.TypeScript absolute and checks that node
// and the SDK's script and dependencies are there.
func (c *Config) checkTypeScript() error {
	if c.TypeScript == "" {
		return nil
	}
	dir, err := filepath.Abs(c.TypeScript)
	if err != nil {
		return err
	}
	c.TypeScript = dir
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("chaos: the TypeScript worker needs node on the PATH: %w", err)
	}
	for _, p := range []string{tsScript, "node_modules/@nats-io/transport-node"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("chaos: the TypeScript worker: %w (is %s the SDK's directory, with npm ci run in it?)", err, dir)
		}
	}
	return nil
}

// withTypeScript adds, with the option, the tool the TypeScript workers
// serve to the parts' environment.
func (h *harness) withTypeScript(env []string) []string {
	if h.cfg.TypeScript == "" {
		return env
	}
	return append(slices.Clip(env), envTSTool+"="+tsTool)
}

// typeScriptWorkers returns the TypeScript worker parts (none without the
// option).
func (h *harness) typeScriptWorkers(env []string) []*part {
	if h.cfg.TypeScript == "" {
		return nil
	}
	var parts []*part
	for i := range tsWorkers {
		parts = append(parts, h.newPart(fmt.Sprintf("worker-ts-%d", i+1), roleTSWorker, env))
	}
	return parts
}

// command is the command that starts one of the part's processes.
func (p *part) command() *exec.Cmd {
	if p.role == roleTSWorker {
		cmd := exec.Command("node", filepath.Join(p.h.cfg.TypeScript, tsScript))
		cmd.Dir = p.h.cfg.TypeScript
		return cmd
	}
	return exec.Command(p.h.cfg.Exe, p.h.cfg.Args...)
}

// servedByTypeScript reports whether the TypeScript workers serve tool,
// for a Go worker part (which then does not).
func servedByTypeScript(tool string) bool {
	return os.Getenv(envTSTool) == tool
}

// checkTypeScriptServed counts the body starts of the TypeScript workers
// in the ledger, in a note; with the option, none is a violation: the
// seed would prove nothing about them.
func (h *harness) checkTypeScriptServed() {
	if h.cfg.TypeScript == "" {
		return
	}
	n := 0
	for _, s := range readStarts(h.ledger) {
		if s.Tool == tsTool && strings.HasPrefix(s.Process, "worker-ts-") {
			n++
		}
	}
	h.notef("typescript: the TypeScript workers started %d bodies of %s", n, tsTool)
	if n == 0 {
		h.violate(Violation{Check: checkTypeScriptIdle, Detail: fmt.Sprintf("the TypeScript workers started no body of %s: the seed proves nothing about them", tsTool)})
	}
}

// checkTypeScriptIdle is the violation of a seed run with the TypeScript
// worker option in which no TypeScript worker started a body.
const checkTypeScriptIdle = "typescript_idle"
