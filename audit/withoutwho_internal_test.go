package audit

import (
	"bytes"
	"testing"
	"time"

	"github.com/weftrun/weft/projections"
)

// TestWithoutWhoDropsEveryWhoField (docs/security.md, "Who did it"): a
// stored view written before the runtime recorded who made the people's
// commands differs from the refold only in those fields, and verify says
// so ("run weft rebuild") only when withoutWho drops every one of them —
// a resolution's verified, reason and key included.
func TestWithoutWhoDropsEveryWhoField(t *testing.T) {
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	view := func(who bool) projections.RunView {
		r := &projections.ResolutionView{Kind: "output", By: "alice", At: at}
		q := &projections.QuestionView{Note: "n", By: "alice", Since: at, Resolution: r}
		if who {
			q.Verified = true
			r.Verified, r.Reason, r.Key = true, "checked the bank", "UKEY"
		}
		return projections.RunView{Run: "r", Actions: []projections.ActionView{{ID: "a", Question: q}}}
	}
	got, want := mustEncode(withoutWho(view(true))), mustEncode(withoutWho(view(false)))
	if !bytes.Equal(got, want) {
		t.Fatalf("withoutWho keeps a who field:\n%s\nagainst\n%s", got, want)
	}
}
