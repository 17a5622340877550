package inboxcheck_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// holdDialer dials the server for real and counts the PINGs written.
// Armed, it holds the next PING (that of a check) until release is closed,
// and says so on held.
type holdDialer struct {
	armed   atomic.Bool
	pings   atomic.Int32
	held    chan struct{}
	release chan struct{}
}

func (d *holdDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, d: d}, nil
}

type holdConn struct {
	net.Conn
	d *holdDialer
}

func (c *holdConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("PING\r\n")) {
		c.d.pings.Add(1)
		if c.d.armed.CompareAndSwap(true, false) {
			c.d.held <- struct{}{}
			<-c.d.release
		}
	}
	return c.Conn.Write(b)
}

// TestACheckUnderWayWhenForgottenKeepsNoVerdict (docs/protocol.md,
// permission_denied: a connection is asked again after a later refusal):
// Forget, called while a check is waiting for the server's answer (the
// caller learnt of a refusal newer than the check's question), is not
// undone by that check's "allowed": the next Once asks again. On the old
// code the check kept its verdict and the next Once asked nothing.
func TestACheckUnderWayWhenForgottenKeepsNoVerdict(t *testing.T) {
	s := natstest.Start(t)
	d := &holdDialer{held: make(chan struct{}), release: make(chan struct{})}
	nc := s.Connect(nats.SetCustomDialer(d))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		r, err := inboxcheck.Once(ctx, nc)
		if r != nil {
			err = r
		}
		done <- err
	}()
	select {
	case <-d.held:
	case <-ctx.Done():
		t.Fatal("the check sent no PING")
	}
	inboxcheck.Forget(nc)
	close(d.release)
	if err := <-done; err != nil {
		t.Fatalf("the check: %v, want allowed", err)
	}
	before := d.pings.Load()
	if r, err := inboxcheck.Once(ctx, nc); r != nil || err != nil {
		t.Fatalf("the next check: %v, %v, want allowed", r, err)
	}
	if d.pings.Load() == before {
		t.Fatal("the next Once asked nothing: the check under way when Forget was called kept its verdict")
	}
}
