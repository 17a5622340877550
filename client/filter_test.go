package client_test

import (
	"encoding/json"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
)

// docs/console.md, "Inbox", and docs/cli.md (weft decide): one filter
// selects the items for both, at a fixed now (no wall clock).
func TestItemFilterSelectsAsTheInboxAndDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	req := &events.Requirement{Name: "pay-desk", Version: 1}
	item := func(f client.ItemFilter) bool {
		return f.Match("pay-7", "2/call_2_1", "send_payment", req, now.Add(-2*time.Hour), json.RawMessage(`{"amount":500}`), now)
	}
	for _, c := range []struct {
		name              string
		tool, requirement string
		older             time.Duration
		lo, hi            string
		items             []string
		want              bool
	}{
		{name: "no filter", want: true},
		{name: "tool", tool: "send_payment", want: true},
		{name: "other tool", tool: "refund", want: false},
		{name: "requirement", requirement: "pay-desk", want: true},
		{name: "requirement version", requirement: "pay-desk@v1", want: true},
		{name: "other version", requirement: "pay-desk@v2", want: false},
		{name: "waited long enough", older: 2 * time.Hour, want: true},
		{name: "not waited long enough", older: 2*time.Hour + time.Second, want: false},
		{name: "amount in range", lo: "500", hi: "500", want: true},
		{name: "amount below", lo: "501", want: false},
		{name: "amount above", hi: "499.5", want: false},
		{name: "named", items: []string{"pay-9/2/call_2_1", "pay-7/2/call_2_1"}, want: true},
		{name: "not named", items: []string{"pay-7/3/call_3_1"}, want: false},
	} {
		f, err := client.ParseItemFilter(c.tool, c.requirement, c.older, c.lo, c.hi, c.items)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := item(f); got != c.want {
			t.Errorf("%s: match %v, want %v", c.name, got, c.want)
		}
	}
	f, _ := client.ParseItemFilter("", "pay-desk", 0, "", "", nil)
	if f.Match("pay-7", "q1", "", nil, now, nil, now) {
		t.Errorf("a requirement filter keeps an item that is no approval request")
	}
	f, _ = client.ParseItemFilter("", "", 0, "1", "", nil)
	if f.Match("pay-7", "2/call_2_1", "send_payment", req, now, json.RawMessage(`{"total":5}`), now) {
		t.Errorf("an amount bound keeps an item whose arguments carry no amount")
	}
	for _, c := range []struct {
		reason string
		older  time.Duration
		lo, hi string
		items  []string
	}{
		{reason: "older_than", older: -time.Hour},
		{reason: "min_amount", lo: "many"},
		{reason: "max_amount", hi: "many"},
		{reason: "item", items: []string{"pay-7"}},
		{reason: "item", items: []string{"/2/call_2_1"}},
	} {
		_, err := client.ParseItemFilter("", "", c.older, c.lo, c.hi, c.items)
		if err == nil || err.Code != weft.CodeBadFilter || err.Reason != c.reason {
			t.Errorf("want bad_filter %s, got %v", c.reason, err)
		}
	}
}
