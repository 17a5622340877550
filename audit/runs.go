package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// Exported is one run of an export file: its events, in version order,
// the void records of its repairs (eventlog.VoidRecord: `weft repair
// drop`) and its legal holds (Hold, as weft_holds keeps them),
// which are not events and change no hash chain.
type Exported struct {
	Run    string
	Events []events.Envelope
	Voids  []eventlog.VoidRecord
	Holds  []Hold
	// HoldsUnread says why the export could not read the run's legal
	// holds (its holds_unread line; "" when it read them, or when it was
	// written before exports carried holds): then Holds says nothing of
	// who held the run, not that nobody did.
	HoldsUnread string
}

// voidLine is the line of an export that carries a void record: {"run":
// RUN, "void": {...}}. It follows its run's events.
type voidLine struct {
	Run  string              `json:"run"`
	Void eventlog.VoidRecord `json:"void"`
}

// HoldSchema is the version of an export's hold lines (holdLine).
const HoldSchema = 1

// holdLine is the line of an export that carries a legal hold of its run,
// as weft_holds keeps it (retention.Hold: who placed it, verified or not,
// with its command proof, why and when, and its release): {"run": RUN,
// "schema": 1, "hold": {...}}. It follows its run's events and void
// records. A reader refuses a schema it does not know (KindParse): a hold
// line of a later format is not read as this one. When the exporter could
// not read the run's holds, one line says so instead, {"run": RUN,
// "schema": 1, "holds_unread": WHY}, so that the file never reads as a
// run without holds.
type holdLine struct {
	Run         string `json:"run"`
	Schema      int    `json:"schema"`
	Hold        *Hold  `json:"hold,omitempty"`
	HoldsUnread string `json:"holds_unread,omitempty"`
}

// holdProbe reads any line that carries a hold or holds_unread key,
// leniently, so that its schema is checked before the hold is decoded
// strictly: a later schema's hold, with fields this one lacks, is refused
// as a later schema, not as an unknown line.
type holdProbe struct {
	Run         string          `json:"run"`
	Schema      *int            `json:"schema"`
	Hold        json.RawMessage `json:"hold"`
	HoldsUnread *string         `json:"holds_unread"`
}

// ExportRun writes one run of an export: its events as JSON lines (as
// Export), then a line per void record, then a line per legal hold
// (holdLine: every hold weft_holds keeps for it, active and released), or,
// when holdsUnread says why they could not be read, one holds_unread line
// instead. An export of several runs writes them one after another;
// ReadRuns splits them again.
func ExportRun(w io.Writer, envs []events.Envelope, voids []eventlog.VoidRecord, holds []Hold, holdsUnread string) error {
	if err := Export(w, envs); err != nil {
		return err
	}
	if len(voids) == 0 && len(holds) == 0 && holdsUnread == "" {
		return nil
	}
	bw := bufio.NewWriter(w)
	for _, v := range voids {
		b, err := json.Marshal(voidLine{Run: envs[0].Run, Void: v})
		if err != nil {
			return fmt.Errorf("audit: export void of %s at %d: %w", envs[0].Run, v.At, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	for _, h := range holds {
		b, err := json.Marshal(holdLine{Run: envs[0].Run, Schema: HoldSchema, Hold: &h})
		if err != nil {
			return fmt.Errorf("audit: export hold %s of %s: %w", h.ID, envs[0].Run, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	if holdsUnread != "" {
		b, err := json.Marshal(holdLine{Run: envs[0].Run, Schema: HoldSchema, HoldsUnread: holdsUnread})
		if err != nil {
			return fmt.Errorf("audit: export holds of %s: %w", envs[0].Run, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// ReadRuns reads an export of one or more runs: each run's lines are
// consecutive (its events, then its void records and legal holds). A line
// that is neither an envelope, a void record nor a hold is a *Problem of
// kind "parse", as is a hold line of a schema it does not know (or of
// none); a run
// whose lines are split by another run's, or a void record or hold of a
// run whose events are not just before it, is a *Problem of kind
// "sequence" naming the line. An export written before exports carried
// holds has no hold line: its runs read with none.
func ReadRuns(r io.Reader) ([]Exported, error) {
	var out []Exported
	seen := map[string]bool{}
	err := eachLine(r, func(line int, b []byte) error {
		// A hold line (or holds_unread) in any key order: an envelope
		// has neither key at its top level.
		if bytes.Contains(b, []byte(`"hold":`)) || bytes.Contains(b, []byte(`"holds_unread":`)) {
			var p holdProbe
			if json.Unmarshal(b, &p) == nil && (p.Hold != nil || p.HoldsUnread != nil) {
				switch {
				case p.Schema == nil:
					return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is a legal hold line of run %q without a schema", line, p.Run)}
				case *p.Schema != HoldSchema:
					return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is a legal hold line of run %q in schema %d, which this weft does not read (it reads schema %d): use a newer weft", line, p.Run, *p.Schema, HoldSchema)}
				}
				var h holdLine
				if err := decodeStrict(b, &h); err != nil {
					return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is not a legal hold line of schema %d: %v", line, HoldSchema, err)}
				}
				if (h.Hold == nil) == (h.HoldsUnread == "") {
					return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is a legal hold line of run %q with both or neither of hold and holds_unread", line, h.Run)}
				}
				if len(out) == 0 || out[len(out)-1].Run != h.Run {
					return &Problem{Kind: KindSequence, Line: line, Message: fmt.Sprintf("line %d is a legal hold of run %q, which is not the run of the events just before it", line, h.Run)}
				}
				if h.Hold != nil {
					out[len(out)-1].Holds = append(out[len(out)-1].Holds, *h.Hold)
				} else {
					out[len(out)-1].HoldsUnread = h.HoldsUnread
				}
				return nil
			}
		}
		if bytes.HasPrefix(b, []byte(`{"run":`)) && bytes.Contains(b, []byte(`"void":`)) {
			var v voidLine
			if decodeStrict(b, &v) == nil {
				if len(out) == 0 || out[len(out)-1].Run != v.Run {
					return &Problem{Kind: KindSequence, Line: line, Message: fmt.Sprintf("line %d is a void record of run %q, which is not the run of the events just before it", line, v.Run)}
				}
				out[len(out)-1].Voids = append(out[len(out)-1].Voids, v.Void)
				return nil
			}
		}
		var env events.Envelope
		if err := decodeStrict(b, &env); err != nil {
			return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is not an event envelope, a void record or a legal hold: %v", line, err)}
		}
		if n := len(out); n > 0 && out[n-1].Run == env.Run && len(out[n-1].Voids) == 0 && len(out[n-1].Holds) == 0 && out[n-1].HoldsUnread == "" {
			out[n-1].Events = append(out[n-1].Events, env)
			return nil
		}
		if seen[env.Run] {
			return &Problem{Kind: KindSequence, Line: line, Message: fmt.Sprintf("line %d is an event of run %q, whose lines came before another run's: a run's lines are consecutive", line, env.Run)}
		}
		seen[env.Run] = true
		out = append(out, Exported{Run: env.Run, Events: []events.Envelope{env}})
		return nil
	})
	return out, err
}

// KindManifest is a range export that does not hold what its manifest
// lists: cut short (no manifest), a run missing or not listed, a run with
// fewer (or other) events than listed.
const KindManifest = "manifest"

// Range is the first line of an export of a time range, {"range": {...}}:
// what was asked for. Its Manifest is the last line.
type Range struct {
	Schema int       `json:"schema"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Status string    `json:"status,omitempty"`
}

// Manifest is the last line of an export of a time range, {"manifest":
// {...}}: the range asked for, each run the file holds with its last
// version and that event's hash, their count, and the runs left out
// because they were removed while the export read them. Written last, so
// a file cut short has none; `weft audit verify --file` checks the file
// against it (CheckManifest).
type Manifest struct {
	Range
	Runs    []ManifestRun `json:"runs"`
	Count   int           `json:"count"`
	Skipped []Skipped     `json:"skipped,omitempty"`
}

// ManifestRun is one run of a Manifest: its last version and the hash of
// that event (its head), and how many void records follow its events.
type ManifestRun struct {
	Run     string `json:"run"`
	Version uint64 `json:"version"`
	Head    string `json:"head"`
	Voids   int    `json:"voids,omitempty"`
	// VoidsSHA256 is the hex SHA-256 of its void records (voidsDigest):
	// they are outside the run's hash chain, so the manifest's digest
	// covers them through it.
	VoidsSHA256 string `json:"voids_sha256,omitempty"`
	// Holds is how many legal holds follow them, HoldsSHA256 the hex
	// SHA-256 of those holds (holdsDigest), for the same reason; both
	// absent in a manifest written before exports carried holds, whose
	// file has none.
	Holds       int    `json:"holds,omitempty"`
	HoldsSHA256 string `json:"holds_sha256,omitempty"`
	// HoldsUnread says why the export could not read the run's legal
	// holds (its holds_unread line), so that the digest vouches for
	// "unknown", not for "none".
	HoldsUnread string `json:"holds_unread,omitempty"`
}

// Skipped is a run of the range left out of the file, and why.
type Skipped struct {
	Run string `json:"run"`
	Why string `json:"why"`
}

type rangeLine struct {
	Range *Range `json:"range"`
}

type manifestLine struct {
	Manifest *Manifest `json:"manifest"`
}

// WriteRange writes the first line of an export of r.
func WriteRange(w io.Writer, r Range) error {
	r.Schema = 1
	b, _ := json.Marshal(rangeLine{&r})
	_, err := w.Write(append(b, '\n'))
	return err
}

// WriteManifest writes the last line of an export and returns its
// digest (ManifestDigest): kept apart from the file, it lets `weft audit
// verify --file --manifest-digest` tell the file as exported from an
// edited one.
func WriteManifest(w io.Writer, m Manifest) (string, error) {
	m.Schema, m.Count = 1, len(m.Runs)
	if m.Runs == nil {
		m.Runs = []ManifestRun{}
	}
	b, _ := json.Marshal(manifestLine{&m})
	_, err := w.Write(append(b, '\n'))
	return ManifestDigest(b), err
}

// ManifestDigest is the digest of a manifest line (without its newline):
// "sha256:" and its hex SHA-256. The manifest names each run's head (the
// hash of its last event, which chains all its events) and the digest of
// its void records, so the digest covers the whole file.
func ManifestDigest(line []byte) string {
	sum := sha256.Sum256(line)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ManifestOf is the manifest entry of one run as ExportRun writes it.
func ManifestOf(envs []events.Envelope, voids []eventlog.VoidRecord, holds []Hold, holdsUnread string) ManifestRun {
	last := envs[len(envs)-1]
	return ManifestRun{Run: last.Run, Version: last.Version, Head: last.Hash(), Voids: len(voids), VoidsSHA256: voidsDigest(voids),
		Holds: len(holds), HoldsSHA256: holdsDigest(holds), HoldsUnread: holdsUnread}
}

// holdsDigest is the hex SHA-256 of holds as JSON ("" for none).
func holdsDigest(holds []Hold) string {
	if len(holds) == 0 {
		return ""
	}
	b, _ := json.Marshal(holds)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// voidsDigest is the hex SHA-256 of voids as JSON ("" for none).
func voidsDigest(voids []eventlog.VoidRecord) string {
	if len(voids) == 0 {
		return ""
	}
	b, _ := json.Marshal(voids)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// File is what ReadFile read: the runs, and for an export of a range
// its first line (Range) and its last (Manifest, nil when the file was
// cut short).
type File struct {
	Range    *Range
	Runs     []Exported
	Manifest *Manifest
	// ManifestDigest is the digest of the manifest line as read
	// (ManifestDigest), "" without one.
	ManifestDigest string
}

// ReadFile reads an export file: one run's (ReadRuns), or a range's,
// which starts with its Range line and ends with its Manifest line.
func ReadFile(r io.Reader) (File, error) {
	var f File
	var body bytes.Buffer
	var lines []int
	err := eachLine(r, func(line int, b []byte) error {
		if f.Manifest != nil {
			return &Problem{Kind: KindManifest, Line: line, Message: fmt.Sprintf("line %d follows the manifest, the export's last line", line)}
		}
		switch {
		case line == 1 && bytes.HasPrefix(b, []byte(`{"range":`)):
			var l rangeLine
			if err := decodeStrict(b, &l); err != nil || l.Range == nil {
				return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line 1 is not an export's range: %v", err)}
			}
			f.Range = l.Range
			return nil
		case bytes.HasPrefix(b, []byte(`{"manifest":`)):
			var l manifestLine
			if err := decodeStrict(b, &l); err != nil || l.Manifest == nil {
				return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is not an export's manifest: %v", line, err)}
			}
			f.Manifest, f.ManifestDigest = l.Manifest, ManifestDigest(b)
			return nil
		}
		body.Write(b)
		body.WriteByte('\n')
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		return f, err
	}
	f.Runs, err = ReadRuns(&body)
	var p *Problem
	if errors.As(err, &p) && p.Line > 0 && p.Line <= len(lines) {
		// The line of the file, not of its body.
		p.Message = strings.Replace(p.Message, fmt.Sprintf("line %d ", p.Line), fmt.Sprintf("line %d ", lines[p.Line-1]), 1)
		p.Line = lines[p.Line-1]
	}
	return f, err
}

// CheckManifest checks f's runs against its manifest: nil for a file of
// one run (no range line) and for a range's file that holds exactly the
// runs its manifest lists, each up to the version and head listed, with
// its void records and legal holds. A range's file without a manifest was
// cut short.
func CheckManifest(f File) *Problem {
	if f.Range == nil && f.Manifest == nil {
		return nil
	}
	have := map[string]Exported{}
	for _, x := range f.Runs {
		have[x.Run] = x
	}
	if f.Manifest == nil {
		last := "no run"
		if n := len(f.Runs); n > 0 {
			x := f.Runs[n-1]
			last = fmt.Sprintf("the last, run %s, up to version %d", x.Run, x.Events[len(x.Events)-1].Version)
		}
		return &Problem{Kind: KindManifest, Message: fmt.Sprintf("the export is cut short: its manifest (the last line of an export of a range) is missing; the file holds %d run(s), %s, which may be incomplete", len(f.Runs), last)}
	}
	m := f.Manifest
	var missing, differ []string
	listed := map[string]bool{}
	for _, r := range m.Runs {
		listed[r.Run] = true
		x, ok := have[r.Run]
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (%d events)", r.Run, r.Version))
			continue
		}
		last := x.Events[len(x.Events)-1]
		if last.Version != r.Version || last.Hash() != r.Head || len(x.Voids) != r.Voids || voidsDigest(x.Voids) != r.VoidsSHA256 ||
			len(x.Holds) != r.Holds || holdsDigest(x.Holds) != r.HoldsSHA256 || x.HoldsUnread != r.HoldsUnread {
			holds := ""
			if len(x.Holds) > 0 || r.Holds > 0 {
				holds = fmt.Sprintf(", %d legal hold(s) in the file, listed %d", len(x.Holds), r.Holds)
			}
			if x.HoldsUnread != r.HoldsUnread {
				holds += fmt.Sprintf(", holds unread %q in the file, listed %q", x.HoldsUnread, r.HoldsUnread)
			}
			differ = append(differ, fmt.Sprintf("%s (%d events and %d void record(s) in the file, listed %d and %d%s, head %s)", r.Run, last.Version, len(x.Voids), r.Version, r.Voids, holds, short(r.Head)))
		}
	}
	var extra []string
	for _, x := range f.Runs {
		if !listed[x.Run] {
			extra = append(extra, x.Run)
		}
	}
	var what []string
	if len(missing) > 0 {
		what = append(what, "missing from the file: "+strings.Join(missing, ", "))
	}
	if len(differ) > 0 {
		what = append(what, "not as listed: "+strings.Join(differ, ", "))
	}
	if len(extra) > 0 {
		what = append(what, "not in the manifest: "+strings.Join(extra, ", "))
	}
	if m.Count != len(m.Runs) {
		what = append(what, fmt.Sprintf("the manifest counts %d runs and lists %d", m.Count, len(m.Runs)))
	}
	switch r := m.Range; {
	case f.Range == nil:
		what = append(what, "the range line (the first) is missing")
	case !f.Range.Since.Equal(r.Since) || !f.Range.Until.Equal(r.Until) || f.Range.Status != r.Status:
		what = append(what, fmt.Sprintf("the range line says [%s, %s)%q and the manifest [%s, %s)%q", f.Range.Since.Format(time.RFC3339), f.Range.Until.Format(time.RFC3339), f.Range.Status, r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), r.Status))
	}
	if len(what) == 0 {
		return nil
	}
	return &Problem{Kind: KindManifest, Message: fmt.Sprintf("the file does not hold what its manifest lists (%d runs): %s", len(m.Runs), strings.Join(what, "; "))}
}

// CheckManifestDigest checks that f's manifest is the one whose digest
// (ManifestDigest) the export printed, want, kept apart from the file:
// the range line and the manifest alone catch a file cut short, not an
// edit (anyone can recompute a manifest from the runs left), so only this
// check ties the file to the export. nil when they agree.
func CheckManifestDigest(f File, want string) *Problem {
	switch {
	case f.Manifest == nil:
		return &Problem{Kind: KindManifest, Message: "a manifest digest was given and the file has no manifest (an export of a range ends with one)"}
	case f.ManifestDigest != want:
		return &Problem{Kind: KindManifest, Message: fmt.Sprintf("the manifest's digest is %s, not %s as given: the file is not the one exported (edited), or the digest is another export's", f.ManifestDigest, want)}
	}
	return nil
}
