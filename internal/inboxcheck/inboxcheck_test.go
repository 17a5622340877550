package inboxcheck_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/internal/inboxcheck"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// TestCheckTellsARefusedInboxAtOnce (docs/protocol.md, permission_denied:
// a refused reply inbox is told at once): on a real server whose user may
// subscribe only under _INBOX.ok, Check answers nil for a connection with
// that inbox prefix and a *Refused naming the inbox (a
// nats.ErrPermissionViolation) for one with another prefix: the server's
// verdict, read after the PING (a check whose wait ended answers nil).
func TestCheckTellsARefusedInboxAtOnce(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "users.conf")
	users := `jetstream: enabled
authorization { users = [
{ user: admin, password: a }
{ user: narrow, password: p, permissions: { publish: [">"], subscribe: ["_INBOX.ok.>"] } }
] }
`
	if err := os.WriteFile(conf, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithConfigFile(conf), natsnode.WithUserPassword("admin", "a")))
	for _, c := range []struct {
		prefix  string
		refused bool
	}{{"_INBOX.ok", false}, {"_INBOX.no", true}} {
		nc, err := nats.Connect(s.URL, nats.UserInfo("narrow", "p"), nats.CustomInboxPrefix(c.prefix), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		err = inboxcheck.Check(context.Background(), nc)
		nc.Close()
		var r *inboxcheck.Refused
		switch {
		case !c.refused && err != nil:
			t.Errorf("inbox prefix %s: %v, want nil", c.prefix, err)
		case c.refused && (!errors.As(err, &r) || !strings.HasPrefix(r.Inbox, c.prefix+".") || !errors.Is(err, nats.ErrPermissionViolation)):
			t.Errorf("inbox prefix %s: %v, want a *Refused naming an inbox under it", c.prefix, err)
		}
	}
}
