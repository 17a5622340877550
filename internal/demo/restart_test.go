package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/projector"
)

// runDemo runs demo.Run on dir until stop is called; it returns the
// output, the NATS URL and stop, which waits for Run and returns its
// error.
func runDemo(t *testing.T, dir string) (*syncbuf.Buffer, string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncbuf.Buffer{}
	urlc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(ctx, demo.Options{DataDir: dir, Listen: "0", Stdout: out, Weft: "weft", Ready: func(u string) { urlc <- u }})
	}()
	select {
	case u := <-urlc:
		return out, u, func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		t.Fatalf("demo.Run: %v\n%s", err, out)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("demo never ready:\n%s", out)
	}
	return nil, "", nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The demo prints one line per event as
// it happens and, on a clean stop, which runs it handed off; after a
// restart on the same store the printed steps name runs that do not exist
// yet (pay-7 is taken: pay-7-2), and the gateway's payment ids do not
// repeat across processes.
func TestDemoRestartPicksFreshIDsAndSaysWhatItHandedOff(t *testing.T) {
	dir := t.TempDir()
	out, url, stop := runDemo(t, dir)
	if !strings.Contains(out.String(), `weft start payment-desk "pay invoice INV-7" --run pay-7 `) {
		t.Fatalf("first start does not offer pay-7:\n%s", out)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, q := api.NewClient(nc), projector.NewClient(nc)
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-8", Agent: demo.AgentName, Input: "pay invoice INV-8"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-7 suspended", func() bool { v, err := q.Run(ctx, "pay-7"); return err == nil && v.Status == "suspended" })
	waitFor(t, "pay-8 finished", func() bool { v, err := q.Run(ctx, "pay-8"); return err == nil && v.Status == "finished" })
	v, _ := q.Run(ctx, "pay-8")
	pay8, _ := v.Action("2/call_2_1")
	nc.Close()
	waitFor(t, "the feed's approval line", func() bool {
		return strings.Contains(out.String(), "pay-7 #13  approval_requested action=2/call_2_1 revision=1 requirement=finance@v1")
	})
	if err := stop(); err != nil {
		t.Fatalf("demo.Run after Ctrl-C: %v", err)
	}
	s := out.String()
	for _, want := range []string{"(waiting for a finance approval (revision 1))", "pay-8 #", "run_finished outcome=completed",
		// pay-7 waits only for a person: an idle run needs no hand-off
		// with partitioned runners (ADR 0019); the next runner reads it
		// back, and the stop line says so.
		"Stopped: no run was in flight; nothing handed off. Run pay-7 waits for a person: the next weft dev on " + dir + " (or any runner on the same NATS) continues it when answered.\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}

	out, url, stop = runDemo(t, dir)
	defer stop()
	s = out.String()
	for _, want := range []string{"--run pay-7-2 ", "--run pay-13 ", `"run":"pay-7-nats"`, "weft show pay-7-2 "} {
		if !strings.Contains(s, want) {
			t.Errorf("restarted demo's steps lack %q:\n%s", want, s)
		}
	}
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, q = api.NewClient(nc), projector.NewClient(nc)
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-8-2", Agent: demo.AgentName, Input: "pay invoice INV-8"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-8-2 finished", func() bool { v, err := q.Run(ctx, "pay-8-2"); return err == nil && v.Status == "finished" })
	v, _ = q.Run(ctx, "pay-8-2")
	again, _ := v.Action("2/call_2_1")
	if pay8.Result == "" || again.Result == "" || pay8.Result == again.Result {
		t.Errorf("payments of two processes: %s and %s, want two distinct ids", pay8.Result, again.Result)
	}
	if !strings.Contains(again.Result, `"id":"PAY-`) {
		t.Errorf("payment result %s", again.Result)
	}
}
