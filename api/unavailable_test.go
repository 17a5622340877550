package api_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// stoppingBackend's Approve loads the run from the log with a context
// that has ended, as a command does whose runner stops under it.
type stoppingBackend struct {
	slowBackend
	log *eventlog.Log
}

func (b *stoppingBackend) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	stopped, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := b.log.Load(stopped, req.Run); err != nil {
		return api.Reply{}, fmt.Errorf("approve: %w", err)
	}
	return api.Reply{}, errors.New("the load did not end")
}

// docs/protocol.md's error table: a command whose read of the log ends
// with its context cancelled (its runner stops) applied nothing and is
// answered unavailable (retry), not internal, which says a bug (the long
// chaos run of docs/reliability.md saw 21 of them).
func TestCommandWhoseLoadIsCancelledIsUnavailable(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(provision.KV(api.CommandsConfig())))
	kv, err := srv.JS.KeyValue(context.Background(), api.CommandsBucket)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := api.Serve(srv.Conn, &stoppingBackend{log: srv.Log}, kv, "0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = api.NewClient(srv.Connect()).Approve(ctx, api.ApproveRequest{CommandID: "c", Run: "r", Action: "1/a", Revision: 1, Approver: "desk", Credential: "x"})
	if weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("answered %v, want unavailable", err)
	}
}
