package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/retention"
)

// printReport prints what `weft audit verify` found for one run: the
// proofs, who made the people's commands, the signed heads, the people's
// keys, and "ok: …" when it verified.
func printReport(w io.Writer, rep audit.Report, envs []events.Envelope, trusted bool, head string) {
	printProofChecks(w, rep.Proofs)
	printDeeds(w, envs)
	headVersion, _, _ := audit.ParseHead(head)
	printHeadChecks(w, rep, trusted, headVersion)
	printPeopleNotes(w, rep)
	if rep.OK() {
		fmt.Fprintf(w, "ok: run %s, %d events, chain intact (head %s), refold agrees, status %s\n", rep.Run, rep.Events, rep.Head, rep.Status)
	}
}

// verifyFileRuns is `weft audit verify --file`: it verifies every run of
// an export, one after another (audit.ReadRuns), each with its void
// records; a file of several runs ends with a line per run and a count.
// Any run with a problem is exit 4, the error naming the first.
func verifyFileRuns(e *env, path string, asJSON, trusted bool, head string, opts []audit.Option) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runs, err := audit.ReadRuns(f)
	var p *audit.Problem
	if errors.As(err, &p) {
		if asJSON {
			printJSON(e.stdout, audit.Report{Problem: p})
		}
		return auditError{fmt.Sprintf("audit: %s", p.Error())}
	}
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		p := &audit.Problem{Kind: audit.KindEmpty, Message: "the file has no events"}
		return auditError{fmt.Sprintf("audit: %s", p.Error())}
	}
	reps := make([]audit.Report, len(runs))
	var failed []string
	for i, x := range runs {
		if len(runs) > 1 && !asJSON {
			fmt.Fprintf(e.stdout, "== run %s (%d events)\n", x.Run, len(x.Events))
		}
		rep := audit.Verify(x.Events, opts...)
		reps[i] = checkVoids(e.stderr, x.Run, x.Voids, rep, opts)
		if !asJSON {
			printReport(e.stdout, reps[i], x.Events, trusted, head)
		}
		if !reps[i].OK() {
			failed = append(failed, x.Run)
			if len(runs) > 1 && !asJSON {
				fmt.Fprintf(e.stdout, "FAILED: run %s: %s\n", x.Run, reps[i].Problem.Error())
			}
		}
	}
	switch {
	case asJSON && len(runs) == 1:
		printJSON(e.stdout, reps[0])
	case asJSON:
		printJSON(e.stdout, reps)
	case len(runs) > 1:
		fmt.Fprintf(e.stdout, "%d of %d runs verified\n", len(runs)-len(failed), len(runs))
	}
	if len(failed) == 0 {
		return nil
	}
	first := reps[slices.IndexFunc(reps, func(r audit.Report) bool { return !r.OK() })]
	if len(runs) == 1 {
		return auditError{fmt.Sprintf("audit: %s", first.Problem.Error())}
	}
	return auditError{fmt.Sprintf("audit: %d of %d runs do not verify (%s); the first, run %s: %s", len(failed), len(runs), strings.Join(failed, ", "), first.Run, first.Problem.Error())}
}

// parseWhen reads a --since or --until: RFC 3339, or a date (midnight UTC).
func parseWhen(flagName, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02)", flagName, s)
}

// auditExportRange is `weft audit export --since --until`: every run
// whose last event was recorded in [since, until) — the time retention
// ages a run by, so an export of the range a purge will remove keeps all
// of it — one after another in one file, each with its void records (in
// run order).
func auditExportRange(ctx context.Context, e *env, sinceS, untilS, status, out string) error {
	if sinceS == "" || untilS == "" {
		return usagef("an export of a range needs --since and --until")
	}
	since, err := parseWhen("since", sinceS)
	if err != nil {
		return err
	}
	until, err := parseWhen("until", untilS)
	if err != nil {
		return err
	}
	if !since.Before(until) {
		return usagef("--since %s is not before --until %s", sinceS, untilS)
	}
	if status != "" && !slices.Contains(projections.Statuses(), status) {
		return usagef("--status %q: want one of %s", status, strings.Join(projections.Statuses(), ", "))
	}
	if out == "" {
		return usagef("an export of a range needs -o FILE")
	}
	n, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer closeNode(n)
	js := n.JetStream()
	views, err := retention.Views(ctx, js)
	if err != nil {
		return err
	}
	var runs []string
	for _, v := range views {
		if !v.Updated.Before(since) && v.Updated.Before(until) && (status == "" || v.Status == status) {
			runs = append(runs, v.Run)
		}
	}
	slices.Sort(runs)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	log := eventlog.New(js)
	total := 0
	for i, run := range runs {
		envs, _, err := log.Load(ctx, run)
		if err != nil {
			return err
		}
		if len(envs) == 0 {
			continue // removed since its view was read
		}
		voids, err := log.Voids(ctx, run)
		if err != nil {
			return err
		}
		if err := audit.ExportRun(f, envs, voids); err != nil {
			return err
		}
		total += len(envs)
		fmt.Fprintf(e.stderr, "exported %d/%d: %s, %d events%s\n", i+1, len(runs), run, len(envs), voidNote(voids))
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "exported %d runs (%d events) whose last event is in [%s, %s) to %s\n", len(runs), total, since.Format(time.RFC3339), until.Format(time.RFC3339), out)
	return nil
}

func voidNote(voids []eventlog.VoidRecord) string {
	if len(voids) == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d void record(s)", len(voids))
}
