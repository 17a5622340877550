package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/natsnode"
)

// Issue 11, newcomer item 8: a second weft dev on a store another embedded
// server holds, or on a port that is taken, exits with the documented code
// of a local problem (5, docs/cli.md), saying what to do, not with 1.
func TestDevLocalProblemsExitLocal(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	code, out, errs := cli(t, "dev", "--listen", "0", "--data", dir)
	if code != exitLocal || !strings.Contains(errs, "store dir in use") || strings.Contains(out, "Weft dev is running") {
		t.Errorf("store in use: exit %d, want %d:\n%s%s", code, exitLocal, out, errs)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	code, out, errs = cli(t, "dev", "--listen", port, "--data", t.TempDir())
	if code != exitLocal || !strings.Contains(errs, "port in use") || !strings.Contains(errs, "--listen") {
		t.Errorf("port taken: exit %d, want %d:\n%s%s", code, exitLocal, out, errs)
	}
	if code, _, errs := cli(t, "audit", "verify", "--file", dir+"/no-such-file.jsonl"); code != exitLocal {
		t.Errorf("audit verify of a missing file: exit %d, want %d: %s", code, exitLocal, errs)
	}
}

// Issue 11, newcomer item 8: unknown_agent names the agents and versions
// the runner serves; and the help spells multi-letter flags --flag, as the
// examples and docs do.
func TestUnknownAgentListsServedAgents(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	_, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
	t.Setenv("NATS_URL", url)
	code, _, errs := cli(t, "start", "payment-dsk", "pay invoice INV-7")
	if code != exitFailed || !strings.Contains(errs, `unknown_agent: no runner serves agent "payment-dsk"; this runner serves payment-desk@1`) {
		t.Fatalf("start of an unknown agent: exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "start", "payment-desk", "x", "--version", "2")
	if code != exitFailed || !strings.Contains(errs, `agent "payment-desk" version "2"; this runner serves payment-desk@1`) {
		t.Fatalf("start of an unknown version: exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "start", "pay desk", "x")
	if code != exitFailed || !strings.Contains(errs, "invalid_name") {
		t.Fatalf("start of a malformed agent name: exit %d: %s", code, errs)
	}
}

func TestHelpSpellsLongFlagsWithTwoDashes(t *testing.T) {
	_, _, errs := cli(t, "approve", "--help")
	for _, want := range []string{"\n  --approver string", "\n  --revision int", "\n  --json\n"} {
		if !strings.Contains(errs, want) {
			t.Errorf("approve --help lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "\n  -approver") {
		t.Errorf("approve --help still spells -approver:\n%s", errs)
	}
	_, _, errs = cli(t, "audit", "--help")
	if !strings.Contains(errs, "\n  -o string") {
		t.Errorf("audit --help: a one-letter flag keeps one dash:\n%s", errs)
	}
}
