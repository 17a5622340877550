package api_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// storeDownBackend answers every cancel with the error a runner's read of
// the log returns while its server does not answer, without a protocol
// code, and counts the cancels it was asked.
type storeDownBackend struct {
	slowBackend
	err     error
	cancels int
}

func (b *storeDownBackend) Cancel(context.Context, api.CancelRequest) (api.Reply, error) {
	b.cancels++
	return api.Reply{}, b.err
}

// TestSemantics8_AServerThatDidNotAnswerIsNotABug (docs/semantics.md §8, "A
// run can always be answered"; docs/protocol.md, unavailable and
// internal): a command whose run could not be read because the server did
// not answer is answered unavailable — retryable, nothing applied — and
// its command id is not kept, so that a retry runs again; an error without
// a code that is no such failure stays internal. Under server kills the
// long chaos run saw commands answered internal for the first kind.
func TestSemantics8_AServerThatDidNotAnswerIsNotABug(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(provision.KV(api.CommandsConfig())))
	kv, err := srv.JS.KeyValue(context.Background(), api.CommandsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err  error
		want weft.Code
	}{
		{fmt.Errorf("load run r: %w", nats.ErrTimeout), weft.CodeUnavailable},
		{fmt.Errorf("load run r: %w", context.DeadlineExceeded), weft.CodeUnavailable},
		{errors.New("an impossible state"), weft.CodeInternal},
	} {
		b := &storeDownBackend{err: c.err}
		svc, err := api.Serve(srv.Conn, b, kv, "0.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		client := api.NewClient(srv.Connect())
		id := "cancel-" + string(c.want) + "-" + fmt.Sprint(time.Now().UnixNano())
		for try := 1; try <= 2; try++ {
			_, err := client.Cancel(context.Background(), api.CancelRequest{CommandID: id, Run: "r", By: "test"})
			if got := weft.ErrorCode(err); got != c.want {
				t.Errorf("%v: try %d answered %s (%v), want %s", c.err, try, got, err, c.want)
			}
		}
		if b.cancels != 2 {
			t.Errorf("%v: the backend was asked %d times for two tries of one command id, want 2 (a refusal that is not definite is not kept)", c.err, b.cancels)
		}
		_ = svc.Stop()
	}
}
