package roles_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/roles"
)

// TestCustodianHoldsThroughTheCommandAPIAndRetentionKeepsTheHeldRun
// (docs/security.md, "Retention and legal hold"; docs/adr/0030 §2, §5):
// on the shipped secure configuration, the custodian places a legal hold
// through the command API (weft.api.hold by client.Hold, served by a
// runner on its own credentials) and then applies retention with its own credentials: the
// held run is kept, the other finished run is purged, and no component is
// refused anything but the reader's and operator's holds: those are
// refused permission_denied at once (the server refuses the publish), and
// hold nothing.
func TestCustodianHoldsThroughTheCommandAPIAndRetentionKeepsTheHeldRun(t *testing.T) {
	d := deploy(t)
	custodian, vc := d.connect(roles.Custodian, api.Queue{})
	ctx := ctxT(t)
	op := api.NewClient(d.operator.Conn())
	q := projector.NewClient(d.reader.Conn())
	for _, run := range []string{"held-1", "free-1"} {
		finishRun(t, d, run)
	}

	// The reader and the operator may not hold: permission_denied at once
	// (a context without deadline: a wait would never end).
	for name, c := range map[string]*api.Client{"reader": api.NewClient(d.reader.Conn()), "operator": op} {
		_, err := c.Hold(context.Background(), api.HoldRequest{Run: "free-1", Reason: "dispute", By: name})
		if !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) {
			t.Fatalf("the %s's hold: %v, want permission_denied", name, err)
		}
	}

	cc, err := client.New(custodian.Conn())
	if err != nil {
		t.Fatal(err)
	}
	h, err := cc.Hold(ctx, api.HoldRequest{CommandID: "h-1", Run: "held-1", Reason: "dispute D-17", By: "legal: r.ortiz"})
	if err != nil || h.Hold != "h1" || h.Run != "held-1" || h.By != "legal: r.ortiz" {
		t.Fatalf("the custodian's hold through the command API: %+v %v (refused %v, runner refused %v)", h, err, vc.all(), d.v.all())
	}
	if again, err := api.NewClient(custodian.Conn()).Hold(ctx, api.HoldRequest{CommandID: "h-1", Run: "held-1", Reason: "dispute D-17", By: "legal: r.ortiz"}); err != nil || again.Hold != "h1" {
		t.Fatalf("the hold retried with its command id: %+v %v, want the same hold h1", again, err)
	}

	// Applied again while the projector has not stored free-1's last view
	// (retention keeps a run whose view is behind its log).
	res := waitFor(t, "retention to purge free-1", func() (retention.Result, bool) {
		res, err := retention.Apply(ctx, custodian.JetStream(), retention.Options{Now: time.Now().Add(48 * time.Hour), OlderThan: time.Hour})
		if err != nil {
			t.Fatalf("retention apply as the custodian: %v (refused %v)", err, vc.all())
		}
		return res, len(res.Purged) > 0
	})
	if !slices.Equal(res.Purged, []string{"free-1"}) || len(res.Kept) != 1 || res.Kept[0].Run != "held-1" {
		t.Fatalf("retention apply: purged %v, kept %v; want free-1 purged and held-1 kept", res.Purged, res.Kept)
	}
	if _, err := q.Run(ctx, "held-1"); err != nil {
		t.Fatalf("the held run after retention: %v", err)
	}
	if h, err := retention.HoldOf(ctx, custodian.JetStream(), "free-1"); err != nil || h.Active() {
		t.Fatalf("free-1 has a hold after the refused ones: %+v %v", h, err)
	}
	d.vr.expect(t, `Publish to "weft.api.hold"`)
	d.vo.expect(t, `Publish to "weft.api.hold"`)
	for name, v := range map[string]*violations{"runner": d.v, "projector": d.vp, "worker": d.vw, "custodian": vc} {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s was refused: %v", name, errs)
		}
	}
}

// finishRun starts run as the operator, waits for its approval request and
// cancels it: a finished run, with events and a view.
func finishRun(t *testing.T, d *deployment, run string) {
	t.Helper()
	ctx := ctxT(t)
	op := api.NewClient(d.operator.Conn())
	q := projector.NewClient(d.reader.Conn())
	if _, err := op.Start(ctx, api.StartRequest{Schema: api.Schema, CommandID: "s-" + run, Run: run, Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the approval request of "+run, func() (bool, bool) {
		it, err := q.Approvals(ctx, projector.InboxRequest{Run: run})
		return true, err == nil && len(it) == 1
	})
	if _, err := op.Cancel(ctx, api.CancelRequest{Schema: api.Schema, CommandID: "c-" + run, Run: run, Reason: "test", By: "op"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, run+" finished", func() (bool, bool) {
		r, err := q.Run(ctx, run)
		return true, err == nil && r.Status == "finished"
	})
}

// TestHoldEndpointsReleaseAndRefuse (docs/protocol/40-commands.md,
// weft.api.hold and weft.api.release_hold; docs/adr/0030 §5): through the
// command API on a real runner, as the custodian, a hold is released by
// its id, or with no id when it is the run's only active one; a release
// with no id of two active holds is invalid_request; a hold on a run
// without events, or a release of a hold that is not active, is
// unknown_run; a request without a command id, reason or author is
// invalid_request; a hold on a run a purge took is conflict and records
// nothing; a retry with a hold's command id answers that hold even once
// the command's kept reply is gone; and the run whose holds were all
// released through the endpoint is purged by the next retention apply.
func TestHoldEndpointsReleaseAndRefuse(t *testing.T) {
	d := deploy(t)
	custodian, vc := d.connect(roles.Custodian, api.Queue{})
	ctx := ctxT(t)
	c := api.NewClient(custodian.Conn())
	finishRun(t, d, "rel-1")
	finishRun(t, d, "taken-1")
	code := func(err error) weft.Code { return weft.ErrorCode(err) }

	// By id, then with no id as the run's only active hold.
	h1, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-1", Run: "rel-1", Reason: "dispute D-17", By: "legal"})
	if err != nil || h1.Hold != "h1" {
		t.Fatalf("hold: %+v %v", h1, err)
	}
	r, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-1", Run: "rel-1", Hold: "h1", Reason: "D-17 settled", By: "legal"})
	if err != nil || r.Hold != "h1" || r.Released == nil || r.Released.By != "legal" || r.Released.Reason != "D-17 settled" {
		t.Fatalf("release by id: %+v %v", r, err)
	}
	if _, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-2", Run: "rel-1", Reason: "subpoena S-3", By: "legal"}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-2", Run: "rel-1", Reason: "S-3 answered", By: "legal"}); err != nil || r.Hold != "h2" || r.Released == nil {
		t.Fatalf("release with no id of the only active hold: %+v %v", r, err)
	}

	// Two active holds: a release must name one.
	for _, id := range []string{"h-3", "h-4"} {
		if _, err := c.Hold(ctx, api.HoldRequest{CommandID: id, Run: "rel-1", Reason: "audit", By: "legal"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-3", Run: "rel-1", Reason: "done", By: "legal"}); code(err) != weft.CodeInvalidRequest {
		t.Fatalf("release with no id of two active holds: %v, want invalid_request", err)
	}

	// unknown_run: a run without events; a hold that is not active.
	if _, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-x", Run: "no-such-run", Reason: "audit", By: "legal"}); code(err) != weft.CodeUnknownRun {
		t.Fatalf("hold of a run without events: %v, want unknown_run", err)
	}
	for _, id := range []string{"h1", "h9"} {
		if _, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-" + id, Run: "rel-1", Hold: id, Reason: "done", By: "legal"}); code(err) != weft.CodeUnknownRun {
			t.Fatalf("release of %s, not active: %v, want unknown_run", id, err)
		}
	}

	// invalid_request: no command id (a raw body, as with nats req; the
	// Go client always sends one), no reason, no author.
	for subject, body := range map[string]string{
		"weft.api.hold":         `{"schema":1,"run":"rel-1","reason":"audit","by":"legal"}`,
		"weft.api.release_hold": `{"schema":1,"run":"rel-1","hold":"h3","reason":"audit","by":"legal"}`,
	} {
		m, err := api.Request(ctx, custodian.Conn(), subject, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var er api.ErrorReply
		if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == nil || er.Error.Code != weft.CodeInvalidRequest || !strings.Contains(er.Error.Message, "command_id") {
			t.Fatalf("%s without a command id: %s, want invalid_request naming command_id", subject, m.Data)
		}
	}
	if _, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-5", Run: "rel-1", By: "legal"}); code(err) != weft.CodeInvalidRequest {
		t.Fatalf("hold without a reason: %v, want invalid_request", err)
	}
	if _, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-5", Run: "rel-1", Hold: "h3", Reason: "done"}); code(err) != weft.CodeInvalidRequest {
		t.Fatalf("release without by: %v, want invalid_request", err)
	}

	// A retry with a hold's command id after its kept reply is gone (its
	// TTL ran out; here the runner's own connection deletes every kept
	// reply) answers that hold and adds none.
	commands, err := d.node.JetStream().KeyValue(ctx, protocol.CommandsBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := commands.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if err := commands.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-3", Run: "rel-1", Reason: "audit", By: "legal"}); err != nil || again.Hold != "h3" {
		t.Fatalf("the hold retried with its command id once the reply is gone: %+v %v, want h3", again, err)
	}
	if again, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-1", Run: "rel-1", Hold: "h1", Reason: "D-17 settled", By: "legal"}); err != nil || again.Hold != "h1" || again.Released == nil {
		t.Fatalf("the release retried with its command id once the reply is gone: %+v %v, want h1 released", again, err)
	}

	// conflict: a purge passed its hold check on taken-1 (its key in
	// weft_holds marked purging, as retention's hold check writes it).
	holds, err := custodian.JetStream().KeyValue(ctx, protocol.HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holds.Create(ctx, "taken-1", []byte(`{"run":"taken-1","holds":[],"purging":"2026-12-01T10:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hold(ctx, api.HoldRequest{CommandID: "h-t", Run: "taken-1", Reason: "late", By: "legal"}); code(err) != weft.CodeConflict {
		t.Fatalf("hold of a run a purge took: %v, want conflict", err)
	}
	if h, err := retention.HoldOf(ctx, custodian.JetStream(), "taken-1"); err != nil || h.Active() {
		t.Fatalf("taken-1 after the refused hold: %+v %v, want no hold", h, err)
	}

	// Release the last two through the endpoint: rel-1 is purged.
	for _, id := range []string{"h3", "h4"} {
		if _, err := c.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: "r-last-" + id, Run: "rel-1", Hold: id, Reason: "done", By: "legal"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "retention to purge rel-1", func() (retention.Result, bool) {
		res, err := retention.Apply(ctx, custodian.JetStream(), retention.Options{Now: time.Now().Add(48 * time.Hour), OlderThan: time.Hour})
		if err != nil {
			t.Fatalf("retention apply as the custodian: %v (refused %v)", err, vc.all())
		}
		return res, slices.Contains(res.Purged, "rel-1")
	})
	if errs := vc.all(); len(errs) > 0 {
		t.Errorf("the custodian was refused: %v", errs)
	}
}
