package console_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/retention"
)

// download fetches the run page's "Download history" and reads it as an
// export (audit.ReadRuns): one run.
func download(t *testing.T, s *stack, run string) ([]byte, audit.Exported) {
	t.Helper()
	resp, body := s.Get(t, "/runs/"+run+"/history")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download of %s: %d\n%s", run, resp.StatusCode, body)
	}
	runs, err := audit.ReadRuns(strings.NewReader(body))
	if err != nil || len(runs) != 1 {
		t.Fatalf("the download of %s does not read as an export of one run (%d runs): %v\n%s", run, len(runs), err, body)
	}
	return []byte(body), runs[0]
}

// TestConsoleHistoryDownloadCarriesTheLegalHolds (docs/console.md, the run
// page's Download history; docs/cli.md, audit export's hold lines): the
// download is the file `weft audit export RUN` writes, legal holds
// included — for a finished run with a hold placed, byte for byte
// audit.ExportRun of its history as stored, no void record, and the hold
// as weft_holds keeps it; it verifies, and audit's reader lists the hold.
func TestConsoleHistoryDownloadCarriesTheLegalHolds(t *testing.T) {
	s := devStack(t)
	const run = "dlhold-8"
	s.Start(t, run, "pay invoice INV-8", "finished")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Cmd.Hold(ctx, api.HoldRequest{Run: run, Reason: "dispute D-17", By: "carol"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(s.NC)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := retention.HoldsOf(ctx, js, run)
	if err != nil || len(stored) != 1 {
		t.Fatalf("the hold placed: %v %v", stored, err)
	}
	envs := s.HistoryAll(t, run)
	var want bytes.Buffer
	if err := audit.ExportRun(&want, envs, nil, stored, ""); err != nil {
		t.Fatal(err)
	}

	got, x := download(t, s, run)
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the download is not audit.ExportRun of the run's history and its hold:\n%s\nwant\n%s", got, want.Bytes())
	}
	if len(x.Holds) != 1 || x.Holds[0].By != "carol" || x.Holds[0].Reason != "dispute D-17" || x.HoldsUnread != "" {
		t.Fatalf("the download's holds: %+v (unread %q), want carol's, read", x.Holds, x.HoldsUnread)
	}
	if rep := audit.Verify(x.Events); !rep.OK() {
		t.Fatalf("the download does not verify: %v", rep.Problem)
	}
	if checks, p := audit.CheckHolds(run, x.Holds); p != nil || len(checks) != 1 {
		t.Fatalf("the download's hold: %v %v", checks, p)
	}
}

// TestConsoleHistoryDownloadSaysHoldsUnread (docs/console.md, Download
// history; docs/security.md, the roles): the secure console connects as
// the operator, who may not read weft_holds, so its download carries the
// holds_unread line `weft audit export` writes with those credentials —
// permission_denied, never a file that reads as "no hold".
func TestConsoleHistoryDownloadSaysHoldsUnread(t *testing.T) {
	s := secureStack(t)
	const run = "dlunread-8"
	s.Start(t, run, "pay invoice INV-8", "finished")
	got, x := download(t, s, run)
	if len(x.Holds) != 0 || !strings.Contains(x.HoldsUnread, "permission_denied") {
		t.Fatalf("the secure console's download: holds %+v, unread %q, want a permission_denied holds_unread line\n%s", x.Holds, x.HoldsUnread, got)
	}
	if rep := audit.Verify(x.Events); !rep.OK() || len(x.Events) == 0 {
		t.Fatalf("the download does not verify (%d events): %v", len(x.Events), rep.Problem)
	}
}
