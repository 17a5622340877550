package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
)

// TestPermissionDeniedIsOnlyAWaitThatEndedAfterARefusal (docs/cli.md,
// exit 7): once the server refused a connection of the command a publish,
// only a call that failed by its wait ending (the symptom of the refused
// request nobody answers) is "not allowed"; a local file error stays exit
// 5, and an outage that is not a wait (a closed connection) stays exit 3.
// The long-running commands (console, mcp, dev) never map: a refusal
// tolerated hours before says nothing of why they stop.
func TestPermissionDeniedIsOnlyAWaitThatEndedAfterARefusal(t *testing.T) {
	s := restricted(t, map[string][]string{"nopub": {"denied.subject"}})
	t.Setenv("NATS_USER", "nopub")
	e := &env{stdout: io.Discard, stderr: io.Discard, url: s.URL, timeout: 10 * time.Second, notesRefusals: true}
	n, err := e.connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(n)
	if err := n.Conn().Publish("denied.subject", nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		r := e.refused
		e.mu.Unlock()
		if r != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server's refusal was never noted")
		}
	}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"a local file error", &fs.PathError{Op: "open", Path: "out.jsonl", Err: fs.ErrPermission}, exitLocal},
		{"a closed connection", &weft.Error{Code: weft.CodeUnavailable, Message: "bucket weft_views: " + nats.ErrConnectionClosed.Error()}, exitUnavailable},
		{"a wait that ended", &weft.Error{Code: weft.CodeUnavailable, Message: "bucket weft_views: " + context.DeadlineExceeded.Error()}, exitDenied},
		{"a wrapped timeout", fmt.Errorf("read: %w", nats.ErrTimeout), exitDenied},
	} {
		if got := exitCode(e.refusedAs(c.err)); got != c.want {
			t.Errorf("%s after a refusal: exit %d, want %d", c.name, got, c.want)
		}
	}
	for _, name := range []string{"console", "mcp", "dev"} {
		if notesRefusals(name) {
			t.Errorf("%s maps a failure to not allowed: it runs for hours", name)
		}
	}
	if !notesRefusals("retention") {
		t.Error("retention does not map a refused call to not allowed")
	}
}

// TestAHoldThatSendsIsNotEndedByARefusal (docs/cli.md, exit 7: nothing
// was sent; docs/adr/0033): weft hold placing or releasing a hold sends a
// command, so a refused JetStream call while it waits for the answer does
// not end it (ended, it would say exit 7 "nothing was sent" of a hold that
// may be placed); hold list, which sends none, is still ended at once. On
// the old code the hold that sends was ended too.
func TestAHoldThatSendsIsNotEndedByARefusal(t *testing.T) {
	const refused = "$JS.API.STREAM.INFO.nothing"
	s := restricted(t, map[string][]string{"nojs": {refused}})
	t.Setenv("NATS_USER", "nojs")
	for _, sends := range []bool{true, false} {
		ctx, end := context.WithCancelCause(context.Background())
		e := &env{stdout: io.Discard, stderr: io.Discard, url: s.URL, timeout: 10 * time.Second, notesRefusals: true, ctx: ctx, end: end, sends: sends}
		n, err := e.connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Conn().Publish(refused, nil); err != nil {
			t.Fatal(err)
		}
		if err := n.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		// The watch (api.Violations) ends the command before it hands the
		// refusal to notePermission: once it is noted, the end was decided.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			e.mu.Lock()
			r := e.refused
			e.mu.Unlock()
			if r != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the server's refusal was never noted")
			}
		}
		if ended := ctx.Err() != nil; ended == sends {
			t.Errorf("sends %v: ended by the refusal of %s: %v, want %v", sends, refused, ended, !sends)
		}
		closeNode(n)
		end(nil)
	}
}
