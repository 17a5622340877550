package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §6: a start under an id that exists is refused
// already_started and writes nothing; §8: the start's driver intent is
// created after its reads (the run's log, then the purge tombstone of a
// new id) and before its first append, so a refused start creates none.
// A guard of that order: a start refused because the run exists
// (finished, its driver entry removed), or because retention purged the
// id, leaves no driver entry behind, and the purged id is still refused.
// The refusal of the existing run is also counted in the start
// endpoint's stats: a start that will not append keeps its lane
// (docs/adr/0041-a-start-s-reads-and-lane.md).
func TestSemantics6_ARefusedStartLeavesNoDriverIntent(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "invoice-7", "input")
	finished(t, h, "invoice-7")
	noEntry := func(run, when string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for h.driverEntry(run) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: run %s still has a driver entry naming %q", when, run, h.driverEntry(run))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	noEntry("invoice-7", "after it finished")
	head, err := h.srv.Log.Head(ctx(t), "invoice-7")
	if err != nil {
		t.Fatal(err)
	}
	errorsBefore, _ := startErrors(t, h)
	_, err = h.client.Start(ctx(t), api.StartRequest{Run: "invoice-7", Agent: "desk", Input: "input"})
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput == nil || !*we.SameInput {
		t.Fatalf("second start of the finished run: %v, want already_started with same_input", err)
	}
	// The refusal is decided on its lane (a start of a run that exists
	// does not release it: docs/protocol/40-commands.md), so the
	// service's stats count it.
	if n, last := startErrors(t, h); n != errorsBefore+1 || !slices.Contains(last, "409:already_started") {
		t.Fatalf("start endpoint's stats: %d errors (last %v), want %d with 409:already_started", n, last, errorsBefore+1)
	}
	// Read right after the reply: the refused start removed its intent
	// before it answered.
	if e := h.driverEntry("invoice-7"); e != "" {
		t.Fatalf("the refused start left a driver entry naming %q", e)
	}
	if after, err := h.srv.Log.Head(ctx(t), "invoice-7"); err != nil || after != head {
		t.Fatalf("the refused start wrote: head %+v, was %+v (%v)", after, head, err)
	}

	// Purged: the id is refused, and no intent stays.
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := provision.EnsureOnly(c, h.srv.JS, projector.Assets()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(c, h.srv.Conn, h.srv.JS, h.srv.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := retention.Apply(ctx(t), h.srv.JS, retention.Options{OlderThan: time.Hour, Now: time.Now().Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(res.Purged, "invoice-7") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never purged: %+v", res)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = h.client.Start(ctx(t), api.StartRequest{Run: "invoice-7", Agent: "desk", Input: "input"})
	if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput != nil {
		t.Fatalf("start of the purged id: %v, want already_started without same_input", err)
	}
	if e := h.driverEntry("invoice-7"); e != "" {
		t.Fatalf("the refused start of the purged id left a driver entry naming %q", e)
	}
	if head, err := h.srv.Log.Head(ctx(t), "invoice-7"); err != nil || !head.IsZero() {
		t.Fatalf("the refused start wrote: head %+v, %v", head, err)
	}
	// A new id starts, its intent written before its first event.
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "invoice-8", Agent: "desk", Input: "input"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "invoice-8")
}

// startErrors returns the errors the start endpoint's lanes counted
// (`nats micro stats weft`, summed over the lanes) and their last errors.
func startErrors(t *testing.T, h *harness) (int, []string) {
	t.Helper()
	m, err := h.srv.Conn.Request("$SRV.STATS."+api.ServiceName, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	n, last := 0, []string(nil)
	for _, e := range st.Endpoints {
		if e.Name == api.EndpointStart || strings.HasPrefix(e.Name, api.EndpointStart+"_") {
			n += e.NumErrors
			if e.LastError != "" {
				last = append(last, e.LastError)
			}
		}
	}
	return n, last
}
