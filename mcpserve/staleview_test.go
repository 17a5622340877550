package mcpserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// startProjector runs a projector on st's log until the returned stop is
// called (stop waits for it to return and release its lease).
func startProjector(t *testing.T, st *mcptest.Stack) (stop func()) {
	t.Helper()
	s := st.Server
	ctx, cancel := context.WithCancel(context.Background())
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestSemantics4_AnApprovalIsNeverAnsweredFromAStaleView: a person approves
// (the approval is in the log: the command answered) while the projector is
// stopped, so the stored view still shows the request pending. Asked again
// with the same key, the server must not say waiting_for_approval with the
// approval listed (no longer true: the MCP client would ask a person to
// approve again): the run query answers at the log's head, so the run goes
// on and the same call settles completed, with no projector running. Before,
// the server took the stale suspended view as settled (CI once saw it in
// TestAnswersSayWhatHappened), and later answered working until a projector
// caught up.
func TestSemantics4_AnApprovalIsNeverAnsweredFromAStaleView(t *testing.T) {
	f := newFixtureOn(t, mcpserve.Config{Wait: time.Second}, mcptest.StartWithoutProjector)
	svc, err := projector.Serve(context.Background(), f.st.Server.Conn, f.st.Server.JS, f.st.Server.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	stop := startProjector(t, f.st)

	args := map[string]any{"input": "pay INV-7", "key": "pay-7"}
	pay, _ := f.settle(t, "notes", args, nil)
	if pay.Status != mcpserve.StatusWaitingForApproval || len(pay.Approvals) != 1 {
		t.Fatalf("pay: %+v", pay)
	}
	a := pay.Approvals[0]
	// The query service folds a run's log when no view is stored yet: wait
	// until the projector stored the view that lists the request, then stop
	// it, so that the stored view stays behind the log.
	views, err := f.st.Server.JS.KeyValue(context.Background(), projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e, err := views.Get(context.Background(), pay.Run)
		if err == nil {
			v, err := projections.DecodeView(e.Value())
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Approvals) == 1 {
				break
			}
		}
		if i == 3000 {
			t.Fatalf("the projector never stored the view of %s listing the approval (last error %v)", pay.Run, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	ctx := context.Background()
	if _, err := f.st.API.Approve(ctx, api.ApproveRequest{CommandID: "ap-1", Run: a.Run, Action: a.Action, Revision: a.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}

	again, _ := f.settle(t, "notes", args, nil)
	if again.Status != mcpserve.StatusCompleted || len(again.Approvals) != 0 || again.Run != pay.Run {
		t.Fatalf("asked again after the approval, with the stored view behind the log: %+v, want completed with nothing to approve", again)
	}
	if st, _ := f.call(t, mcpserve.DefaultStatusTool, map[string]any{"run": pay.Run}, nil); st.Status != mcpserve.StatusCompleted || len(st.Approvals) != 0 {
		t.Fatalf("status tool after the approval, with the stored view behind the log: %+v, want completed", st)
	}
}
