package roles_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/worker"
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
	custodian, vc := d.connect(roles.Custodian, worker.Queue{})
	ctx := ctxT(t)
	op := api.NewClient(d.operator.Conn())
	q := projector.NewClient(d.reader.Conn())
	for _, run := range []string{"held-1", "free-1"} {
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
