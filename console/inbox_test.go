package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

// TestInboxShowsEveryItem (docs/protocol/50-queries.md: an inbox pages by
// `next`; docs/adr/0020-query-indexes.md): the console's inbox shows every
// pending approval and uncertain effect of inboxes larger than one page
// of the query service (1,010 each; a page holds at most 1,000): its
// title counts them all and the last run's cards are on it.
func TestInboxShowsEveryItem(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	const n = 1010
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := events.Requirement{Name: "finance", Version: 1}
	var ds []eventlog.Decision
	for i := range n {
		ds = append(ds, eventlog.Decision{Run: fmt.Sprintf("many-%05d", i), At: at.Add(time.Duration(i) * time.Microsecond), Events: []events.Event{
			events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Runner: "r"},
			events.ModelRequested{Turn: 1},
			events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
				{ID: "a", Name: "pay", Arguments: json.RawMessage(`{}`)}, {ID: "b", Name: "wire", Arguments: json.RawMessage(`{}`)}}},
			events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: req, Why: "policy"},
			events.AttemptFenced{Action: "1/b", Tool: "wire", Attempt: 1},
			events.AttemptReported{Action: "1/b", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "timed out"},
		}})
	}
	for i, o := range s.Log.AppendBatch(context.Background(), ds) {
		if o.Err != nil {
			t.Fatalf("append %s: %v", ds[i].Run, o.Err)
		}
	}
	q := projector.NewClient(s.Conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := q.Uncertain(ctx, projector.InboxRequest{Run: ds[n-1].Run})
		if err == nil && len(r.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last run's items were never projected: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := console.New(s.Conn, console.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if want := fmt.Sprintf("<title>Inbox (%d)", 2*n); !strings.Contains(page, want) {
		i := strings.Index(page, "<title>")
		t.Fatalf("inbox page: want %q, got %.80s", want, page[max(i, 0):])
	}
	for _, want := range []string{ds[n-1].Run, ds[0].Run} {
		if !strings.Contains(page, want) {
			t.Fatalf("inbox page lacks run %s", want)
		}
	}
}
