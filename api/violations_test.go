package api_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// TestViolationsEndTheWatchedCallAtOnce (docs/protocol.md,
// permission_denied): a KV call whose publish the server refuses ends at
// once, its context's cause a permission_denied naming the $JS.API
// subject, never a wait (its context has no deadline, so the call would
// otherwise wait for JetStream's own timeout); a watch of another
// $JS.API subject goes on (matching is per subject), and the connection's
// own error handler still gets the error.
func TestViolationsEndTheWatchedCallAtOnce(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "users.conf")
	users := `{ user: admin, password: a }
{ user: nokv, password: p, permissions: { publish: { allow: [">"], deny: ["$JS.API.STREAM.INFO.KV_denied"] }, subscribe: [">"] } }
`
	if err := os.WriteFile(conf, []byte("jetstream: enabled\nauthorization { users = [\n"+users+"] }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithConfigFile(conf), natsnode.WithUserPassword("admin", "a")))
	had := make(chan error, 16)
	nc, err := nats.Connect(s.URL, nats.UserInfo("nokv", "p"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { had <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	v := api.WatchViolations(nc)
	other, stopOther := v.Watch(context.Background(), func(verb, subject string) bool {
		return verb == api.PublishViolation && subject == "$JS.API.STREAM.INFO.KV_other"
	})
	defer stopOther()
	ctx, stop := v.Watch(context.Background(), func(verb, subject string) bool {
		return verb == api.PublishViolation && api.JetStreamSubject(subject)
	})
	defer stop()
	_, err = js.KeyValue(ctx, "denied")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the refused call: %v, want it ended (context canceled)", err)
	}
	denied := api.DeniedBy(ctx)
	if denied == nil || denied.Code != weft.CodePermissionDenied || !strings.Contains(denied.Message, "permission to publish to $JS.API.STREAM.INFO.KV_denied") {
		t.Fatalf("the watch's cause: %v, want permission_denied naming the subject", context.Cause(ctx))
	}
	if other.Err() != nil {
		t.Fatalf("a watch of other subjects was ended: %v", context.Cause(other))
	}
	select {
	case err := <-had:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the connection's own handler got %v, want the violation", err)
		}
	case <-time.After(30 * time.Second): // a bound, not a timing assertion
		t.Fatal("the connection's own handler got nothing: the violation was not passed on")
	}
}
