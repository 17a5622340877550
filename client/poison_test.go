package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// poison is one kind of malformed message published on a run's subject.
type poison struct {
	run  string
	kind string
	// msg builds the message from the run's head.
	msg func(run string, head eventlog.Head) *nats.Msg
}

func poisons() []poison {
	raw := func(run string, head eventlog.Head, body string) *nats.Msg {
		m := nats.NewMsg(eventlog.Subject(run))
		m.Data = []byte(body)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(head.Seq, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, eventlog.RunFilter(run))
		return m
	}
	// next is a well-formed envelope following head, of type name.
	next := func(run string, head eventlog.Head, name events.Name, payload string) string {
		env := events.Envelope{ID: "01KB9Y5C00CLI000000000000" + string(rune('A'+head.Version%20)), Run: run, Version: head.Version + 1,
			Type: name, Schema: 1, Recorded: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC), Prev: head.Hash, Payload: json.RawMessage(payload)}
		b, _ := json.Marshal(map[string]any{"schema": 1, "events": []events.Envelope{env}})
		return string(b)
	}
	return []poison{
		{"x-json", "not JSON", func(run string, h eventlog.Head) *nats.Msg { return raw(run, h, "this is not JSON {") }},
		{"x-envelope", "valid JSON, wrong envelope", func(run string, h eventlog.Head) *nats.Msg {
			return raw(run, h, `{"hello":"world","events":[{"run":"someone-else"}]}`)
		}},
		{"x-type", "unknown event name", func(run string, h eventlog.Head) *nats.Msg {
			return raw(run, h, next(run, h, "no_such_event", `{}`))
		}},
		{"x-header", "bad header", func(run string, h eventlog.Head) *nats.Msg {
			m := raw(run, h, next(run, h, events.NameCancelRequested, `{"by":"mallory"}`))
			m.Header.Set(eventlog.HeaderRun, "someone-else")
			return m
		}},
	}
}

// serveStack runs the payment desk with host.Run (runner, projector and
// queries) on a test server and returns the server and a client.
func serveStack(t *testing.T) (*natstest.Server, *client.Client) {
	t.Helper()
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	return serveAgent(t, desk)
}

// eventually retries f every 20 ms until it returns nil or ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// docs/adr/0011-quarantine-and-repair-of-malformed-messages.md
// (docs/semantics.md §8: nothing acts on a state it cannot
// derive): a malformed message on one run's subject — not JSON, valid JSON
// in the wrong envelope, an unknown event name, a header naming another run
// — quarantines that run alone. Among healthy runs: every other run keeps
// being projected and served (queries, commands), new runs are projected,
// the projector's checkpoint moves past the message; the poisoned run's
// view says quarantined with the message's sequence, its history and
// commands answer quarantined, its approvals leave the inbox, client.Wait
// answers quarantined; after `weft repair drop` (eventlog.Void) the run is
// served again and completes.
func TestAPoisonedRunIsQuarantinedAndEveryOtherRunIsServed(t *testing.T) {
	s, c := serveStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	log := eventlog.New(s.JS)
	views, err := s.JS.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	pending := func(run string) func(projections.RunView) bool {
		return func(v projections.RunView) bool {
			a, ok := v.Action("2/call_2_1")
			return ok && a.Pending != nil
		}
	}
	projected := func(run, status string) func() error {
		return func() error {
			e, err := views.Get(ctx, run)
			if err != nil {
				return err
			}
			var v projections.RunView
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return err
			}
			if v.Status != status {
				return fmt.Errorf("view of %s is %s, want %s", run, v.Status, status)
			}
			return nil
		}
	}
	healthy := []string{"h-1", "h-2", "h-3", "h-4", "h-5", "h-6"}
	cases := poisons()
	var all []string
	all = append(all, healthy...)
	for _, p := range cases {
		all = append(all, p.run)
	}
	for _, run := range all {
		if _, err := c.Start(ctx, api.StartRequest{Run: run, Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range all {
		if _, err := c.Wait(ctx, run, pending(run)); err != nil {
			t.Fatalf("wait %s: %v", run, err)
		}
		eventually(ctx, t, "projected "+run, projected(run, projections.StatusSuspended))
	}

	// Poison.
	seqs := map[string]uint64{}
	for _, p := range cases {
		head, err := log.Head(ctx, p.run)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := s.JS.PublishMsg(ctx, p.msg(p.run, head))
		if err != nil {
			t.Fatalf("%s: publish: %v", p.kind, err)
		}
		seqs[p.run] = ack.Sequence
	}
	last := seqs[cases[len(cases)-1].run]

	// New runs are projected; the checkpoint moves past the bad messages.
	for _, run := range []string{"n-1", "n-2"} {
		if _, err := c.Start(ctx, api.StartRequest{Run: run, Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, "projected new run "+run, projected(run, projections.StatusSuspended))
	}
	state, err := s.JS.KeyValue(ctx, projector.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "checkpoint past the bad messages", func() error {
		e, err := state.Get(ctx, projector.KeyCheckpoint)
		if err != nil {
			return err
		}
		var cp projector.Checkpoint
		if err := json.Unmarshal(e.Value(), &cp); err != nil {
			return err
		}
		if cp.Seq <= last {
			return fmt.Errorf("checkpoint %d, the last bad message is at %d", cp.Seq, last)
		}
		return nil
	})

	// The poisoned runs: quarantined with the sequence, refused, out of
	// the inbox.
	for _, p := range cases {
		eventually(ctx, t, p.kind+": view quarantined", projected(p.run, projections.StatusQuarantined))
		v, err := c.Run(ctx, p.run)
		if err != nil {
			t.Fatalf("%s: query run: %v", p.kind, err)
		}
		if v.Status != projections.StatusQuarantined || v.Quarantine == nil || v.Quarantine.Seq != seqs[p.run] || v.Quarantine.Reason == "" {
			t.Fatalf("%s: view status %s quarantine %+v, want quarantined at seq %d", p.kind, v.Status, v.Quarantine, seqs[p.run])
		}
		if _, err := c.History(ctx, projector.HistoryRequest{Run: p.run}); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
			t.Fatalf("%s: history: %v, want quarantined", p.kind, err)
		}
		a, _ := v.Action("2/call_2_1")
		if a.Pending == nil {
			t.Fatalf("%s: the quarantined view lost the pending request folded before the bad message", p.kind)
		}
		_, err = c.Approve(ctx, api.ApproveRequest{CommandID: "a-" + p.run, Run: p.run, Action: a.ID, Revision: a.Pending.Revision, Approver: demo.Approver, Credential: "alice"})
		if !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
			t.Fatalf("%s: approve: %v, want quarantined", p.kind, err)
		}
		if _, err := c.Cancel(ctx, api.CancelRequest{CommandID: "c-" + p.run, Run: p.run}); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
			t.Fatalf("%s: cancel: %v, want quarantined", p.kind, err)
		}
		if _, err := c.Wait(ctx, p.run, client.Finished); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
			t.Fatalf("%s: wait: %v, want quarantined", p.kind, err)
		}
		items, err := c.Approvals(ctx, projector.InboxRequest{Run: p.run})
		if err != nil || len(items) != 0 {
			t.Fatalf("%s: approvals inbox of the quarantined run: %v %d items, want none", p.kind, err, len(items))
		}
	}
	page, err := c.List(ctx, projections.ListQuery{Status: projections.StatusQuarantined})
	if err != nil || len(page.Runs) != len(cases) {
		t.Fatalf("list quarantined: %v %+v, want the %d poisoned runs", err, page, len(cases))
	}

	// Every other run is served: approved, it completes.
	for _, run := range append(healthy, "n-1", "n-2") {
		approve(ctx, t, c, run)
	}

	// Repair: each poisoned run is served again and completes.
	for _, p := range cases {
		if _, err := log.Void(ctx, p.run, seqs[p.run]+1, "test", "tester", time.Now()); !errors.Is(err, &weft.Error{Code: weft.CodeInvalidRequest}) {
			t.Fatalf("%s: void of another sequence: %v, want invalid_request", p.kind, err)
		}
		if _, err := log.Void(ctx, p.run, seqs[p.run], "published by a test", "tester", time.Now()); err != nil {
			t.Fatalf("%s: void: %v", p.kind, err)
		}
		eventually(ctx, t, p.kind+": repaired view", projected(p.run, projections.StatusSuspended))
		approve(ctx, t, c, p.run)
	}
}

// approve answers run's pending payment and waits for it to complete.
func approve(ctx context.Context, t *testing.T, c *client.Client, run string) {
	t.Helper()
	v, err := c.Run(ctx, run)
	if err != nil {
		t.Fatalf("%s: %v", run, err)
	}
	a, _ := v.Action("2/call_2_1")
	if a.Pending == nil {
		t.Fatalf("%s: nothing pending: %s", run, v.Status)
	}
	if _, err := c.Approve(ctx, api.ApproveRequest{CommandID: "ok-" + run, Run: run, Action: a.ID, Revision: a.Pending.Revision, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatalf("%s: approve: %v", run, err)
	}
	v, err = c.Wait(ctx, run, client.Finished)
	if err != nil || v.Outcome == nil || v.Outcome.Kind != "completed" {
		t.Fatalf("%s: wait finished: %v %+v", run, err, v.Outcome)
	}
}
