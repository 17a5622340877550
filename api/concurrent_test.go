package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
)

// heldBackend holds the approval of run "held" until released; every
// other approval is answered at once.
type heldBackend struct {
	slowBackend
	release chan struct{}
}

func (b *heldBackend) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	if req.Run == "held" {
		select {
		case <-b.release:
		case <-ctx.Done():
			return api.Reply{}, &weft.Error{Code: weft.CodeRunnerBusy, Message: "busy"}
		}
	}
	return api.Reply{Schema: api.Schema, Run: req.Run, Status: "working"}, nil
}

// TestSemantics8_ACommandWaitingForItsRunDelaysNoOther (SEMANTICS.md §8,
// "A run can always be answered"; docs/protocol.md, runner_busy): one
// approval waits for its run (a busy run, or a forward to a runner that
// stopped answering); an approval of another run on the same endpoint is
// answered meanwhile. Before, a micro endpoint applied one request at a
// time, so every command behind the waiting one waited up to its command
// timeout (the draining runner's forwards held starts for about 11 s).
func TestSemantics8_ACommandWaitingForItsRunDelaysNoOther(t *testing.T) {
	srv := natstest.Start(t)
	b := &heldBackend{release: make(chan struct{})}
	svc, err := api.Serve(srv.Conn, b, nil, "0.0.0", api.WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	client := api.NewClient(srv.Connect())
	held := make(chan error, 1)
	go func() {
		_, err := client.Approve(context.Background(), api.ApproveRequest{Run: "held", Action: "1/a", Revision: 1, Approver: "desk", Credential: "x"})
		held <- err
	}()
	time.Sleep(100 * time.Millisecond) // the held approval reaches the service first
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := make(chan error, 1)
	go func() {
		_, err := client.Approve(ctx, api.ApproveRequest{Run: "other", Action: "1/a", Revision: 1, Approver: "desk", Credential: "x"})
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("the other approval: %v", err)
		}
	case err := <-held:
		t.Fatalf("the held approval ended first (%v): the test did not hold it", err)
	case <-ctx.Done():
		t.Fatal("the other run's approval waited behind the held one")
	}
	close(b.release)
	if err := <-held; err != nil {
		t.Fatalf("the held approval: %v", err)
	}
}
