package audit_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/internal/fuzzseed"
)

// verifyFile reads an exported history and verifies it, as weft audit
// verify --file does.
func verifyFile(b []byte) (audit.Report, error) {
	envs, err := audit.ReadExport(bytes.NewReader(b))
	if err != nil {
		return audit.Report{}, err
	}
	return audit.Verify(envs), nil
}

// FuzzAuditFile fuzzes the reading and verification of an audit file (an
// exported history, one envelope per line, as `weft audit export` writes
// and `weft audit verify --file` reads): whatever the
// bytes, neither panics; a file that is not envelopes is refused with a
// *audit.Problem of kind parse naming the line; a file that is verifies or
// names its first problem.
func FuzzAuditFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := verifyFile(b)
		if err != nil {
			var p *audit.Problem
			if errors.As(err, &p) && (p.Kind != audit.KindParse || p.Line < 1) {
				t.Fatalf("ReadExport refused with problem %+v, want kind parse naming a line", p)
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
