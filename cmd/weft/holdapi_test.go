package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/runner"
)

// serveCommands runs a real runner on s's own connection, serving the
// command API (weft.api.hold and weft.api.release_hold among it), until
// the test ends.
func serveCommands(t *testing.T, s *natstest.Server) {
	t.Helper()
	const lease = time.Second
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if err := runner.Provision(pctx, s.JS, lease); err != nil {
		t.Fatal(err)
	}
	ag, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := runner.New(s.Conn, s.JS, []*agent.Agent{ag}, runner.WithLease(lease), runner.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rn.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := api.NewClient(s.Conn).Ready(pctx); err != nil {
		t.Fatal(err)
	}
}

// TestHoldCLIGoesThroughTheCommandAPI (docs/cli.md, hold; docs/security.md,
// "Retention and legal hold"; docs/adr/0033 §3): `weft hold` and `weft
// hold --release` send weft.api.hold and weft.api.release_hold, so
// credentials that may send those commands but may neither read nor write
// the weft_holds bucket place and release holds, which a runner records;
// sent again with the same --command-id they answer the same hold (h1,
// one hold recorded, with that command id), and another command id places
// another hold beside it. On the old code, which wrote weft_holds itself,
// these credentials were refused (exit 7).
func TestHoldCLIGoesThroughTheCommandAPI(t *testing.T) {
	s := restricted(t, map[string][]string{"noholds": {"$KV.weft_holds.>", "$JS.API.*.*.KV_weft_holds", "$JS.API.DIRECT.GET.KV_weft_holds.>", "$JS.API.CONSUMER.*.KV_weft_holds.>"}})
	serveCommands(t, s)
	appendRunAt(t, s.Log, "held-api", time.Now().Add(-time.Hour).Truncate(time.Second), answered("a")...)

	t.Setenv("NATS_USER", "noholds")
	for i := range 2 {
		if code, out, errs := cli(t, "hold", "held-api", "--reason", "dispute D-17", "--by", "legal: r.ortiz", "--command-id", "cli-h1"); code != 0 || !strings.Contains(out, "held held-api (hold h1) by legal: r.ortiz (unverified): dispute D-17") {
			t.Fatalf("hold (try %d) through the command API: exit %d\n%s%s", i+1, code, out, errs)
		}
	}
	if code, out, errs := cli(t, "hold", "held-api", "--reason", "dispute D-18", "--by", "legal", "--command-id", "cli-h2", "--json"); code != 0 || !strings.Contains(out, `"id": "h2"`) || !strings.Contains(out, `"command_id": "cli-h2"`) {
		t.Fatalf("a second hold with another command id: exit %d\n%s%s", code, out, errs)
	}
	// The list reads the bucket: these credentials may not.
	if code, out, errs := cli(t, "hold", "list"); code != exitDenied || !strings.Contains(errs, "KV_weft_holds") {
		t.Fatalf("hold list without the bucket: exit %d, want %d\n%s%s", code, exitDenied, out, errs)
	}
	for i := range 2 {
		if code, out, errs := cli(t, "hold", "--release", "held-api", "--hold", "h1", "--reason", "D-17 settled", "--by", "legal: r.ortiz", "--command-id", "cli-r1"); code != 0 || !strings.Contains(out, "released hold h1 on held-api by legal: r.ortiz (unverified): D-17 settled (placed by legal: r.ortiz (unverified))") {
			t.Fatalf("release (try %d) through the command API: exit %d\n%s%s", i+1, code, out, errs)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holds, err := retention.Holds(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(holds)
	if len(holds) != 2 || holds[0].ID != "h1" || holds[0].CommandID != "cli-h1" || holds[0].Released == nil || holds[0].Released.CommandID != "cli-r1" ||
		holds[1].ID != "h2" || holds[1].CommandID != "cli-h2" || !holds[1].Active() {
		t.Fatalf("the holds recorded: %s; want h1 (cli-h1, released by cli-r1) and h2 (cli-h2, active)", b)
	}
}
