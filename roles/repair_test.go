package roles_test

import (
	"context"
	"errors"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projector"
)

// TestRepairNeedsTheRunnersCredentials (docs/security.md):
// `weft repair show` reads what an operator may read (the quarantine, the
// offending message), but `weft repair drop` appends to the log, which only
// the runner's credentials may: the operator's void record is refused by
// the server and the run stays quarantined; the runner's lands, and the
// run is served again (the operator's approval completes it).
func TestRepairNeedsTheRunnersCredentials(t *testing.T) {
	d := deploy(t)
	startPay7(t, d)
	ctx := ctxT(t)
	// A runner's bug (or anyone with its credentials) lands junk on the
	// run's subject.
	ack, err := d.node.JetStream().Publish(ctx, eventlog.Subject("pay-7"), []byte("junk"))
	if err != nil {
		t.Fatal(err)
	}
	q := projector.NewClient(d.reader.Conn())
	waitFor(t, "the quarantined view", func() (bool, bool) {
		r, err := q.Run(ctx, "pay-7")
		return true, err == nil && r.Quarantine != nil && r.Quarantine.Seq == ack.Sequence
	})

	oplog := eventlog.New(d.operator.JetStream(), eventlog.WithAttemptTimeout(time.Second))
	p, err := oplog.Quarantine(ctx, "pay-7")
	if err != nil || p == nil || p.Seq != ack.Sequence {
		t.Fatalf("repair show as the operator: %v %v", p, err)
	}
	if m, err := oplog.Message(ctx, ack.Sequence); err != nil || string(m.Data) != "junk" {
		t.Fatalf("the offending message as the operator: %q %v", m.Data, err)
	}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := oplog.Void(octx, "pay-7", ack.Sequence, "junk", "op", time.Now()); err == nil {
		t.Fatal("the operator voided a message: it may not append to the log")
	}
	d.vo.expect(t, `Publish to "weft.ev.pay-7.events"`)
	if p, _ := oplog.Quarantine(ctx, "pay-7"); p == nil {
		t.Fatal("the run is no longer quarantined after the operator's refused repair")
	}

	if _, err := eventlog.New(d.node.JetStream()).Void(ctx, "pay-7", ack.Sequence, "junk", "runner-admin", time.Now()); err != nil {
		t.Fatalf("repair drop with the runner's credentials: %v (refused %v)", err, d.v.all())
	}
	waitFor(t, "the repaired view", func() (bool, bool) {
		r, err := q.Run(ctx, "pay-7")
		return true, err == nil && r.Quarantine == nil && r.Status == "suspended"
	})
	var rerr error
	for range 50 {
		_, rerr = api.NewClient(d.operator.Conn()).Approve(ctx, api.ApproveRequest{Schema: api.Schema, CommandID: "a-1", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "alice"})
		if !errors.Is(rerr, &weft.Error{Code: weft.CodeQuarantined}) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rerr != nil {
		t.Fatalf("approve after the repair: %v", rerr)
	}
	waitFor(t, "pay-7 finished", func() (bool, bool) {
		r, err := q.Run(ctx, "pay-7")
		return true, err == nil && r.Status == "finished"
	})
}
