package console

import (
	"bytes"
	"strings"
	"testing"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/projections"
)

// The audit panel names a recorded proof that does not verify, with its
// reason, and says the refold stopped there (a history altered after the
// approval: audit.Verify's kind proof).
func TestAuditPanelShowsAProofThatDoesNotVerify(t *testing.T) {
	pages, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	d := runData{View: projections.RunView{Run: "r1", Status: projections.StatusFinished}, Audit: auditPanel{Report: audit.Report{
		Events: 9,
		Proofs: []audit.ProofCheck{
			{Version: 5, Action: "1/a", Revision: 1, Answer: "approve", Key: "UKEYONE", Reviewer: "alice", Verifier: "keys", Verified: true},
			{Version: 8, Action: "1/b", Revision: 2, Answer: "approve", Key: "UKEYTWO", Verifier: "keys", Reason: "other_arguments: the proof is for arguments with SHA-256 3690a0c6…"},
		},
		Problem: &audit.Problem{Kind: audit.KindProof, Version: 8, Message: "event 8: the signed proof does not verify"},
	}}}
	var b bytes.Buffer
	if err := pages["run"].ExecuteTemplate(&b, "layout", page{Title: "Run r1", Data: d}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{
		`<li data-version="5" data-verified="true">`, `UKEYONE`, `reviewer alice`,
		`<li data-version="8" data-verified="false">`, `UKEYTWO`, `does not verify</strong>: other_arguments: the proof is for arguments`,
		`Problem found: <code>proof</code>`, `stopped at a signed proof that does not verify`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the audit panel lacks %q", want)
		}
	}
}
