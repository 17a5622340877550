package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// slowBackend's Approve uses its whole request deadline, then succeeds or
// refuses runner_busy; every other command is refused.
type slowBackend struct {
	calls atomic.Int64
	busy  bool
}

func (b *slowBackend) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	b.calls.Add(1)
	<-ctx.Done()
	if b.busy {
		return api.Reply{}, &weft.Error{Code: weft.CodeRunnerBusy, Message: "busy"}
	}
	return api.Reply{Schema: api.Schema, Run: req.Run, Status: "working"}, nil
}

func refuse() error { return &weft.Error{Code: weft.CodeInternal, Message: "not in this test"} }

func (b *slowBackend) Start(context.Context, api.StartRequest) (api.StartReply, error) {
	return api.StartReply{}, refuse()
}
func (b *slowBackend) Reject(context.Context, api.RejectRequest) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Reconcile(context.Context, api.ReconcileRequest, bool) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Settle(context.Context, api.Settlement) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Cancel(context.Context, api.CancelRequest) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Pause(context.Context, api.PauseRequest) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Resume(context.Context, api.ResumeRequest) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Restart(context.Context, api.RestartRequest) (api.StartReply, error) {
	return api.StartReply{}, refuse()
}
func (b *slowBackend) Report(context.Context, api.Report) (api.Reply, error) {
	return api.Reply{}, refuse()
}
func (b *slowBackend) Decide(context.Context, api.DecideRun) (api.DecideRunReply, error) {
	return api.DecideRunReply{}, nil
}
func (b *slowBackend) Resolve(context.Context, api.ResolveRequest) (api.Reply, error) {
	return api.Reply{}, refuse()
}

// Command idempotency (docs/semantics.md §2, docs/protocol/40-commands.md): a
// command that used its whole request deadline still has its reply kept
// (success: the same command id gets it again, never applied twice) or its
// claim released (runner_busy: a retry runs again at once).
func TestCommandIDWhenTheCommandUsedItsWholeDeadline(t *testing.T) {
	for _, busy := range []bool{false, true} {
		srv := natstest.Start(t, natstest.WithAssets(provision.KV(api.CommandsConfig())))
		kv, err := srv.JS.KeyValue(context.Background(), api.CommandsBucket)
		if err != nil {
			t.Fatal(err)
		}
		b := &slowBackend{busy: busy}
		// The command id's claim (a KV create) is made within the same
		// deadline: 2 s leaves a loaded machine room for it (300 ms did
		// not), at the cost of three deadlines per case.
		svc, err := api.Serve(srv.Conn, b, kv, "0.0.0", api.WithRequestTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		if err := srv.Conn.Flush(); err != nil { // the endpoints' subscriptions reached the server
			t.Fatal(err)
		}
		client := api.NewClient(srv.Connect())
		req := api.ApproveRequest{CommandID: "once", Run: "r", Action: "1/a", Revision: 1, Approver: "desk", Credential: "x"}
		call := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Approve(ctx, req)
			return err
		}
		first, second := call(), call()
		switch {
		case !busy && (first != nil || second != nil || b.calls.Load() != 1):
			t.Errorf("applied: replies %v, %v; backend called %d times, want the same reply and 1 call", first, second, b.calls.Load())
		case busy && (weft.ErrorCode(first) != weft.CodeRunnerBusy || b.calls.Load() != 2):
			t.Errorf("runner_busy: first %v; backend called %d times, want the retry to run again (2 calls)", first, b.calls.Load())
		}
	}
}

// docs/protocol/41-tasks.md: a report or settlement names its queue by its
// subject, never in its body; a body with "queue": null names the field
// as well and is refused invalid_request like any other queue in the body
// (it was read as absent), so bad input gets a clear error.
func TestReportBodyWithQueueNullIsRefused(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(provision.KV(api.CommandsConfig())))
	kv, err := srv.JS.KeyValue(context.Background(), api.CommandsBucket)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := api.Serve(srv.Conn, &slowBackend{}, kv, "0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	nc := srv.Connect()
	for _, c := range []struct{ subject, body string }{
		{"weft.api.report", `{"schema":1,"command_id":"r-1","run":"pay-7","action":"2/call_2_1","attempt":1,"incarnation":1,"outcome":"output","content":{},"queue":null}`},
		{"weft.api.settle", `{"schema":1,"command_id":"s-1","run":"refund-8","action":"1/call_1_1","outcome":"output","content":{},"queue":null}`},
	} {
		m, err := nc.Request(c.subject, []byte(c.body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Error *weft.Error `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("%s: %v: %s", c.subject, err, m.Data)
		}
		if rep.Error == nil || rep.Error.Code != weft.CodeInvalidRequest || !strings.Contains(rep.Error.Message, "queue is not a body field") {
			t.Errorf("%s with \"queue\": null answered %s, want invalid_request (queue is not a body field)", c.subject, m.Data)
		}
	}
}
