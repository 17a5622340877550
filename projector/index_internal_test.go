package projector

import (
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// TestIndexKeysOfTheProtocolExample: the keys docs/protocol/50-queries.md
// gives for run pay-42 ("Order indexes") are the ones the projector
// writes.
func TestIndexKeysOfTheProtocolExample(t *testing.T) {
	at, _ := time.Parse(time.RFC3339Nano, "2026-11-30T10:18:36.570Z")
	c := projections.Change{Summary: projections.Summary{Schema: 1, Run: "pay-42", Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Status: "suspended", Updated: at}}
	es := entries(c)
	if len(es) != 1 || es[0].key != "runs.e.01796033916570.suspended.payment-desk.pay-42" {
		t.Fatalf("entries %+v", es)
	}
	var got []string
	for _, ch := range es[0].chains() {
		got = append(got, nodes(es[0].index, es[0].window, ch.node)...)
	}
	for _, want := range []string{
		"runs.d.p.01.suspended.payment-desk",
		"runs.d.p01.79.suspended.payment-desk",
		"runs.d.p017960339165.70.suspended.payment-desk",
		"runs.d.p.01.all",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("node %s not written; nodes %v", want, got)
		}
	}
	if len(got) != 14 {
		t.Errorf("%d nodes, want 7 in each of 2 directories", len(got))
	}
	if Token("") != "=" || Token("a.b c") != "a=2Eb=20c" || window(time.Time{}) != "00000000000000" {
		t.Errorf("token or window encoding changed")
	}
}
