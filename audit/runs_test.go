package audit_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/audittest"
)

// TestExportOfSeveralRunsReadsBackRunByRun: ExportRun of two runs, the
// second with a void record, reads back (ReadRuns) as the two runs, each
// verifying, the void with its run; lines of a run after another run's,
// or a void record after another run's events, are a sequence problem
// naming the line.
func TestExportOfSeveralRunsReadsBackRunByRun(t *testing.T) {
	a, err := audittest.Chain("run-a", t0, paymentRun())
	if err != nil {
		t.Fatal(err)
	}
	b, err := audittest.Chain("run-b", t0, paymentRun())
	if err != nil {
		t.Fatal(err)
	}
	void := eventlog.VoidRecord{At: 9, Void: eventlog.Void{Seq: 7, SHA256: strings.Repeat("ab", 32), Bytes: 17, Subject: "weft.ev.run-b.events", Problem: "not a log message", Reason: "pasted", By: "alice", Recorded: t0}}
	var buf bytes.Buffer
	if err := audit.ExportRun(&buf, a, nil, nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := audit.ExportRun(&buf, b, []eventlog.VoidRecord{void}, nil, ""); err != nil {
		t.Fatal(err)
	}
	runs, err := audit.ReadRuns(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Run != "run-a" || runs[1].Run != "run-b" || len(runs[0].Voids) != 0 || len(runs[1].Voids) != 1 || runs[1].Voids[0].Reason != "pasted" {
		t.Fatalf("read back %d runs: %+v", len(runs), runs)
	}
	for _, x := range runs {
		if rep := audit.Verify(x.Events); !rep.OK() || rep.Events != len(paymentRun()) {
			t.Fatalf("%s: %+v", x.Run, rep)
		}
	}

	lines := strings.SplitAfter(buf.String(), "\n")
	n := len(paymentRun())
	// run-a's last event moved after run-b's first: run-a's lines split.
	split := strings.Join(append(append(append([]string{}, lines[:n-1]...), lines[n], lines[n-1]), lines[n+1:]...), "")
	var p *audit.Problem
	if _, err := audit.ReadRuns(strings.NewReader(split)); !errors.As(err, &p) || p.Kind != audit.KindSequence || p.Line != n+1 {
		t.Fatalf("split run: %v, want sequence at line %d", err, n+1)
	}
	// run-b's void record right after run-a's events.
	misplaced := strings.Join(append(append([]string{}, lines[:n]...), lines[2*n]), "")
	if _, err := audit.ReadRuns(strings.NewReader(misplaced)); !errors.As(err, &p) || p.Kind != audit.KindSequence || p.Line != n+1 {
		t.Fatalf("misplaced void: %v, want sequence at line %d", err, n+1)
	}
}
