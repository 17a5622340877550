package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/retention"
)

// printReport prints what `weft audit verify` found for one run: the
// proofs, who made the people's commands, the signed heads, the people's
// keys, and "ok: …" when it verified.
func printReport(w io.Writer, rep audit.Report, envs []events.Envelope, trusted bool, headVersion uint64) {
	printProofChecks(w, rep.Proofs)
	printDeeds(w, envs)
	printHeadChecks(w, rep, trusted, headVersion)
	printPeopleNotes(w, rep)
	printForkCheck(w, rep.Fork)
	printHoldChecks(w, rep)
	if rep.OK() {
		fmt.Fprintf(w, "ok: run %s, %d events, chain intact (head %s), refold agrees, status %s\n", rep.Run, rep.Events, rep.Head, rep.Status)
	}
}

// printForkCheck prints the link of a restarted run to its parent: held
// (the parent's history given hashes to the chain hash the fork recorded)
// or unchecked, and why.
func printForkCheck(w io.Writer, f *audit.ForkCheck) {
	switch {
	case f == nil:
	case f.Checked:
		fmt.Fprintf(w, "fork: from %s at version %d: the parent's history hashes there to the chain hash the fork recorded (%s): the link holds\n", f.Parent, f.Version, f.Hash)
	default:
		fmt.Fprintf(w, "note: fork: from %s at version %d: the link to the parent is unchecked: %s\n", f.Parent, f.Version, f.Unchecked)
	}
}

// forkParent is the run envs were restarted from (its RunForked), or "".
func forkParent(envs []events.Envelope) string {
	for _, env := range envs {
		if env.Type != events.NameRunForked {
			continue
		}
		if ev, err := env.Event(); err == nil {
			if f, ok := ev.(events.RunForked); ok {
				return f.From.Run
			}
		}
	}
	return ""
}

// namedHead is a --head: VERSION:HASH, or RUN:VERSION:HASH naming the
// run of a file of several.
type namedHead struct {
	run, text string // text is VERSION:HASH
	version   uint64
	hash      string
}

// parseHeads reads the --head flags: at most one per run, and a head
// without a run only alone.
func parseHeads(flags []string) ([]namedHead, error) {
	var out []namedHead
	for _, f := range flags {
		var h namedHead
		h.text = f
		if parts := strings.Split(f, ":"); len(parts) == 3 {
			h.run, h.text = parts[0], parts[1]+":"+parts[2]
		}
		v, hash, err := audit.ParseHead(h.text)
		if err != nil {
			return nil, usagef("--head: %v (want VERSION:HASH, or RUN:VERSION:HASH for a run of a file of several)", err)
		}
		h.version, h.hash = v, hash
		for _, o := range out {
			if o.run == h.run {
				return nil, usagef("--head: two heads for run %q", h.run)
			}
		}
		out = append(out, h)
	}
	if len(out) > 1 && slices.ContainsFunc(out, func(h namedHead) bool { return h.run == "" }) {
		return nil, usagef("--head: several heads, and %q names no run: give each as RUN:VERSION:HASH", out[slices.IndexFunc(out, func(h namedHead) bool { return h.run == "" })].text)
	}
	return out, nil
}

// headsFor returns the options and the head text for run among the heads
// named (a head without a run is the one run's); a head naming no run of
// runs is a bad command line, as is a head without a run for a file of
// several.
func headsFor(heads []namedHead, runs []string) (map[string]namedHead, error) {
	out := map[string]namedHead{}
	for _, h := range heads {
		switch {
		case h.run == "" && len(runs) != 1:
			return nil, usagef("--head %s names no run, and the file holds %d runs (%s): give --head RUN:VERSION:HASH for each run you have a head of", h.text, len(runs), strings.Join(runs, ", "))
		case h.run == "":
			out[runs[0]] = h
		case !slices.Contains(runs, h.run):
			return nil, usagef("--head %s:%s: no run %q in it (it holds %s)", h.run, h.text, h.run, strings.Join(runs, ", "))
		default:
			out[h.run] = h
		}
	}
	return out, nil
}

// verifyFileRuns is `weft audit verify --file`: it verifies every run of
// an export, one after another (audit.ReadFile), each with its void
// records and the --head named for it; a file of several runs ends with a
// line per run and a count. An export of a range is checked against its
// manifest (audit.CheckManifest: cut short, a run missing or incomplete);
// an empty range's file (0 runs, its manifest says so) verifies. Any run
// with a problem, or a file that does not hold what its manifest lists,
// is exit 4, the error naming the first.
func verifyFileRuns(e *env, path string, asJSON, trusted bool, headFlags []string, manifestDigest string, opts []audit.Option) error {
	heads, err := parseHeads(headFlags)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	file, err := audit.ReadFile(f)
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
	runs := file.Runs
	if len(runs) == 0 && file.Range == nil {
		p := &audit.Problem{Kind: audit.KindEmpty, Message: "the file has no events"}
		return auditError{fmt.Sprintf("audit: %s", p.Error())}
	}
	var ids []string
	for _, x := range runs {
		ids = append(ids, x.Run)
	}
	byRun, err := headsFor(heads, ids)
	if err != nil {
		return err
	}
	reps := make([]audit.Report, len(runs))
	var failed []string
	several := len(runs) > 1 || file.Range != nil
	for i, x := range runs {
		if several && !asJSON {
			fmt.Fprintf(e.stdout, "== run %s (%d events)\n", x.Run, len(x.Events))
		}
		ro := opts
		h, named := byRun[x.Run]
		if named {
			ro = append(slices.Clip(opts), audit.WithHeadAt(h.version, h.hash))
		}
		// A restarted run whose parent the file holds too: its link.
		if parent := forkParent(x.Events); parent != "" {
			if i := slices.IndexFunc(runs, func(r audit.Exported) bool { return r.Run == parent }); i >= 0 {
				ro = append(slices.Clip(ro), audit.WithParent(runs[i].Events))
			}
		}
		rep := audit.Verify(x.Events, ro...)
		unread := ""
		if x.HoldsUnread != "" {
			unread = "the export could not read them: " + x.HoldsUnread
		}
		reps[i] = checkHolds(x.Run, x.Holds, unread, checkVoids(e.stderr, x.Run, x.Voids, rep, ro), ro)
		if !asJSON {
			printReport(e.stdout, reps[i], x.Events, trusted, h.version)
		}
		if !reps[i].OK() {
			failed = append(failed, x.Run)
			if several && !asJSON {
				fmt.Fprintf(e.stdout, "FAILED: run %s: %s\n", x.Run, reps[i].Problem.Error())
			}
		}
	}
	mp := audit.CheckManifest(file)
	if mp == nil && manifestDigest != "" {
		mp = audit.CheckManifestDigest(file, manifestDigest)
	}
	ranged := file.Range != nil || file.Manifest != nil || manifestDigest != ""
	switch {
	case asJSON && len(runs) == 1 && !ranged:
		printJSON(e.stdout, reps[0])
	case asJSON && ranged:
		printJSON(e.stdout, rangeReport{Range: file.Range, Manifest: file.Manifest, Digest: file.ManifestDigest, Reports: reps, Problem: mp})
	case asJSON:
		printJSON(e.stdout, reps)
	case several:
		if m := file.Manifest; m != nil {
			fmt.Fprintf(e.stdout, "range [%s, %s)%s: the manifest lists %d run(s)\n", m.Since.Format(time.RFC3339), m.Until.Format(time.RFC3339), statusNote(m.Status), m.Count)
			for _, sk := range m.Skipped {
				fmt.Fprintf(e.stdout, "note: the export left out run %s: %s\n", sk.Run, sk.Why)
			}
		}
		switch {
		case file.Range == nil && file.Manifest == nil:
			fmt.Fprintln(e.stdout, "note: no range line: whether the file is complete is not checked (an export of a range starts with one and ends with its manifest)")
		case mp == nil && manifestDigest != "":
			fmt.Fprintf(e.stdout, "the manifest's digest is the one given (%s): the file is the one exported\n", manifestDigest)
		case mp == nil:
			fmt.Fprintf(e.stdout, "note: the manifest catches a file cut short, not an edit: give the digest the export printed (--manifest-digest %s, if that is it) to check the file is the one exported\n", file.ManifestDigest)
		}
		if mp != nil {
			fmt.Fprintf(e.stdout, "FAILED: %s\n", mp.Error())
		}
		fmt.Fprintf(e.stdout, "%d of %d runs verified\n", len(runs)-len(failed), len(runs))
	}
	if len(failed) == 0 && mp == nil {
		return nil
	}
	if len(failed) == 0 {
		return auditError{fmt.Sprintf("audit: %s", mp.Error())}
	}
	first := reps[slices.IndexFunc(reps, func(r audit.Report) bool { return !r.OK() })]
	if len(runs) == 1 && mp == nil {
		return auditError{fmt.Sprintf("audit: %s", first.Problem.Error())}
	}
	msg := fmt.Sprintf("audit: %d of %d runs do not verify (%s); the first, run %s: %s", len(failed), len(runs), strings.Join(failed, ", "), first.Run, first.Problem.Error())
	if mp != nil {
		msg += "; and " + mp.Error()
	}
	return auditError{msg}
}

// rangeReport is `verify --file --json` of a range's export: the range
// line, the manifest and its digest as read, each run's report, and the
// file's problem against its manifest (cut short, a run missing, a digest
// not the one given; null when none).
type rangeReport struct {
	Range    *audit.Range    `json:"range"`
	Manifest *audit.Manifest `json:"manifest"`
	Digest   string          `json:"manifest_digest,omitempty"`
	Reports  []audit.Report  `json:"reports"`
	Problem  *audit.Problem  `json:"manifest_problem"`
}

func statusNote(status string) string {
	if status == "" {
		return ""
	}
	return ", status " + status
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
	// An export cut short leaves no file that looks whole (writeWhole),
	// and its manifest, the last line, is what verify checks it against.
	rg := audit.Range{Since: since.UTC(), Until: until.UTC(), Status: status}
	m := audit.Manifest{Range: rg}
	total := 0
	var digest string
	err = writeWhole(out, func(w io.Writer) error {
		if err := audit.WriteRange(w, rg); err != nil {
			return err
		}
		log := eventlog.New(js)
		for i, run := range runs {
			envs, voids, err := readWhole(ctx, log, run)
			if err != nil {
				return err
			}
			var holds []audit.Hold
			var unread string
			if len(envs) > 0 {
				holds, unread = holdsForExport(ctx, e, js, run)
			}
			if len(envs) == 0 {
				why := "removed (retention) after the range was read: its events are gone"
				m.Skipped = append(m.Skipped, audit.Skipped{Run: run, Why: why})
				fmt.Fprintf(e.stderr, "skipped %d/%d: %s, %s\n", i+1, len(runs), run, why)
				continue
			}
			if err := audit.ExportRun(w, envs, voids, holds, unread); err != nil {
				return err
			}
			m.Runs = append(m.Runs, audit.ManifestOf(envs, voids, holds, unread))
			total += len(envs)
			fmt.Fprintf(e.stderr, "exported %d/%d: %s, %d events%s%s\n", i+1, len(runs), run, len(envs), voidNote(voids), holdNote(holds))
		}
		digest, err = audit.WriteManifest(w, m)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "exported %d runs (%d events) whose last event is in [%s, %s) to %s\n", len(m.Runs), total, since.Format(time.RFC3339), until.Format(time.RFC3339), out)
	// The manifest catches a file cut short; only its digest, kept apart
	// from the file, catches an edit.
	fmt.Fprintf(e.stderr, "manifest digest %s (keep it apart from the file: `weft audit verify --file %s --manifest-digest %s` checks the file is the one exported)\n", digest, out, digest)
	if len(m.Skipped) > 0 {
		var names []string
		for _, sk := range m.Skipped {
			names = append(names, sk.Run)
		}
		return partialError{done: fmt.Sprintf("exported %d of the %d runs of the range to %s", len(m.Runs), len(runs), out), err: fmt.Errorf("skipped %d run(s) removed while the export read them (listed in the file's manifest): %s", len(names), strings.Join(names, ", "))}
	}
	return nil
}

// writeWhole writes path with write, whole or not at all: to a temp file
// in path's directory, synced and renamed to path once write returned
// nil (removed otherwise), and the directory synced, so an export that
// stops half way (an error, a kill) never leaves a file at path that
// looks complete. Else it behaves as a file written in place: a symlink
// at path is written through (its target replaced), an existing file's
// mode is kept (a new file is 0600: an export is the deployment's
// history), and what is not a regular file (a FIFO, /dev/stdout, a
// device) is written directly.
func writeWhole(path string, write func(w io.Writer) error) error {
	mode := os.FileMode(0o600)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return writeInPlace(path, write)
		}
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	w := bufio.NewWriter(f)
	if err := write(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeInPlace writes what is not a regular file (a FIFO, a device)
// directly: there is nothing to rename.
func writeInPlace(path string, write func(w io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// exportRead, when set (tests), is called while an export of a range
// reads a run: after its events ("events") and after its void records
// ("voids"); an error stops the export there, as a crash would.
var exportRead func(run, step string) error

// readWhole reads run's events and void records for an export, whole or
// not at all: a purge (retention) may remove the run while they are read
// (its events and void records go in one purge, the last step of a
// removal), so the log's head is read after both: gone means the run is
// left out (no events returned), and a head past the events read (a
// resolution recorded meanwhile) reads the run again.
func readWhole(ctx context.Context, log *eventlog.Log, run string) ([]events.Envelope, []eventlog.VoidRecord, error) {
	for try := 0; ; try++ {
		envs, _, err := log.Load(ctx, run)
		if err != nil {
			return nil, nil, err
		}
		if exportRead != nil {
			if err := exportRead(run, "events"); err != nil {
				return nil, nil, err
			}
		}
		voids, err := log.Voids(ctx, run)
		if err != nil {
			return nil, nil, err
		}
		if exportRead != nil {
			if err := exportRead(run, "voids"); err != nil {
				return nil, nil, err
			}
		}
		h, err := log.Head(ctx, run)
		switch {
		case err != nil:
			return nil, nil, err
		case h.IsZero():
			return nil, nil, nil
		case len(envs) > 0 && h.Version == envs[len(envs)-1].Version:
			return envs, voids, nil
		case try == 2:
			return nil, nil, fmt.Errorf("run %s: its log's head moved (version %d) while it was read three times: export again", run, h.Version)
		}
	}
}

func voidNote(voids []eventlog.VoidRecord) string {
	if len(voids) == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d void record(s)", len(voids))
}

func holdNote(holds []audit.Hold) string {
	if len(holds) == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d legal hold(s)", len(holds))
}

// holdsForExport reads run's legal holds (active and released) from
// weft_holds for an export (readHolds), or says why they could not be
// read (credentials that may not read the bucket, the reader's; no answer
// in time; a value that does not decode): then the export writes that as
// its holds_unread line, never as a run without holds, and stderr says so.
func holdsForExport(ctx context.Context, e *env, js jetstream.JetStream, run string) ([]audit.Hold, string) {
	holds, err := readHolds(ctx, e.refusals, js, run)
	if err != nil {
		fmt.Fprintf(e.stderr, "note: the legal holds of %s could not be read (%v): the export says so (holds_unread), who held the run is not in it\n", run, err)
		return nil, err.Error()
	}
	return auditHolds(holds), ""
}

// auditHolds is holds as an export carries them and audit.CheckHolds
// checks them (audit.Hold: the same fields, in the same encoding).
func auditHolds(holds []retention.Hold) []audit.Hold {
	var out []audit.Hold
	for _, h := range holds {
		a := audit.Hold{Run: h.Run, ID: h.ID, By: h.By, Identity: h.Identity, Proof: h.Proof, Reason: h.Reason, At: h.At, CommandID: h.CommandID}
		if r := h.Released; r != nil {
			a.Released = &audit.HoldRelease{By: r.By, Identity: r.Identity, Proof: r.Proof, Reason: r.Reason, At: r.At, CommandID: r.CommandID}
		}
		out = append(out, a)
	}
	return out
}
