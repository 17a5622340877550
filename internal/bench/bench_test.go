package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/bench"
)

// TestMain runs the test binary as a bench subprocess when Run starts it
// as one (bench.Child).
func TestMain(m *testing.M) {
	if child, err := bench.Child(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickSectionsPairEveryFigureWithABaseline runs the log-append,
// history, recovery and idle-run sections briefly (the recovery one
// SIGKILLs a runner subprocess, this very test binary; the idle one starts
// three) and checks the report: every figure that is not itself a
// baseline names a baseline of the same run, with its value and the
// ratio, and the table and JSON carry them. It judges no number.
func TestQuickSectionsPairEveryFigureWithABaseline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{Quick: true, Progress: &progress, Only: []string{"append", "history", "recovery", "idle"}, IdleRuns: 64,
		Exec: func() (string, []string) { return os.Args[0], []string{"-test.run=^$"} }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("sections failed: %v\nprogress:\n%s", rep.Errors, progress.String())
	}
	want := map[string]bool{bench.SectionBaseline: false, bench.SectionAppend: false, bench.SectionHistory: false, bench.SectionRecovery: false, bench.SectionIdle: false}
	for _, r := range rep.Rows {
		want[r.Section] = true
		if r.Value <= 0 || r.Unit == "" {
			t.Errorf("%s / %s: value %v %q", r.Section, r.Name, r.Value, r.Unit)
		}
		if r.Section == bench.SectionBaseline {
			continue
		}
		if r.Baseline == "" || r.BaseValue <= 0 || r.Ratio != r.Value/r.BaseValue {
			t.Errorf("%s / %s: baseline %q %v, ratio %v", r.Section, r.Name, r.Baseline, r.BaseValue, r.Ratio)
		}
	}
	for s, seen := range want {
		if !seen {
			t.Errorf("no row of section %s", s)
		}
	}
	var table, js bytes.Buffer
	if err := bench.WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if !strings.Contains(table.String(), r.Name) {
			t.Errorf("table lacks %q", r.Name)
		}
	}
	var back bench.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Fatalf("JSON: %v, %d rows", err, len(back.Rows))
	}
	if !strings.Contains(progress.String(), "recovery after SIGKILL") {
		t.Errorf("no progress line for the recovery:\n%s", progress.String())
	}
}
