package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §6: a start under an existing id is refused
// already_started and writes nothing — also when the run of that id was
// purged by retention: its id is never used again, so a client's "one
// run per invoice" id cannot start a second payment, and no new run
// shares the purged one's idempotency keys (docs/adr/0030).
func TestSemantics6_StartUnderAPurgedRunIDIsRefused(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "invoice-42", "input")
	finished(t, h, "invoice-42")

	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := provision.EnsureOnly(c, h.srv.JS, projector.Assets()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(c, h.srv.Conn, h.srv.JS, h.srv.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	// Apply keeps the run until the projector covers it; each Apply is
	// a whole pass, so this waits for the projector without racing it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := retention.Apply(ctx(t), h.srv.JS, retention.Options{OlderThan: time.Hour, Now: time.Now().Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(res.Purged, "invoice-42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never purged: %+v", res)
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, input := range []string{"input", "other"} {
		_, err := h.client.Start(ctx(t), api.StartRequest{Run: "invoice-42", Agent: "desk", Input: input})
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput != nil || !strings.Contains(we.Message, "purged") {
			t.Fatalf("start of the purged id with input %q: %v", input, err)
		}
	}
	if head, err := h.srv.Log.Head(ctx(t), "invoice-42"); err != nil || !head.IsZero() {
		t.Fatalf("the refused start wrote: head %+v, %v", head, err)
	}
	// A timer of the purged run that fires anyway (armed again by a
	// runner that raced the purge) is acknowledged and dropped: nothing is
	// written under the id, and it is not redelivered for ever.
	if err := timer.New(h.srv.JS).Arm(ctx(t), "invoice-42", "late", time.Now()); err != nil {
		t.Fatal(err)
	}
	for {
		ci, err := h.srv.JS.Consumer(ctx(t), timer.Stream, timer.Consumer)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ci.Info(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer > 0 && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the purged run's timer was not acknowledged: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if head, err := h.srv.Log.Head(ctx(t), "invoice-42"); err != nil || !head.IsZero() {
		t.Fatalf("the purged run's timer wrote: head %+v, %v", head, err)
	}
	// A new id still starts.
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "invoice-43", Agent: "desk", Input: "input"}); err != nil {
		t.Fatal(err)
	}
}
