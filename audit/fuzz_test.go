package audit_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/internal/fuzzseed"
)

// verifyFile reads an export of one or more runs and verifies each, as
// weft audit verify --file does: the first report with a problem, else
// the last run's report.
func verifyFile(b []byte) (audit.Report, error) {
	runs, err := audit.ReadRuns(bytes.NewReader(b))
	if err != nil {
		return audit.Report{}, err
	}
	if len(runs) == 0 {
		return audit.Verify(nil), nil
	}
	var rep audit.Report
	for _, x := range runs {
		if rep = audit.Verify(x.Events); !rep.OK() {
			return rep, nil
		}
	}
	return rep, nil
}

// FuzzAuditFile fuzzes the reading and verification of an audit file (an
// export of one or more runs, one envelope or void record per line, as
// `weft audit export` writes and `weft audit verify --file` reads):
// whatever the bytes, neither panics; a file that is not envelopes and
// void records is refused with a *audit.Problem of kind parse naming the
// line, one whose run's lines are not consecutive with one of kind
// sequence naming the line; a file that reads verifies or names its first
// problem.
func FuzzAuditFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := verifyFile(b)
		if err != nil {
			var p *audit.Problem
			if errors.As(err, &p) && (p.Kind != audit.KindParse && p.Kind != audit.KindSequence || p.Line < 1) {
				t.Fatalf("ReadRuns refused with problem %+v, want kind parse or sequence naming a line", p)
			}
			return
		}
		if !rep.OK() && rep.Problem.Message == "" {
			t.Fatalf("Verify reported problem %+v without a message", rep.Problem)
		}
	})
}

// TestAuditSeedsAreMeaningful: FuzzAuditFile's seeds named valid-* read
// and verify, every other seed is refused by one or the other.
func TestAuditSeedsAreMeaningful(t *testing.T) {
	seeds, err := fuzzseed.Read(".", "FuzzAuditFile")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		rep, err := verifyFile([]byte(s.Values[0]))
		if ok := err == nil && rep.OK(); ok != s.Valid() {
			t.Errorf("%s: read %v, verified %+v", s.Name, err, rep.Problem)
		}
	}
}
