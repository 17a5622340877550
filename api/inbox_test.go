package api_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/inboxcheck"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// narrowServer starts a real server whose user "narrow" may publish
// anything but weft.denied and subscribe only under subscribe (a subject pattern); admin
// may do everything. It returns the server and the path of its users file.
func narrowServer(t *testing.T, subscribe string) (*natstest.Server, string) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "users.conf")
	writeNarrow(t, conf, subscribe)
	return natstest.Start(t, natstest.WithNodeOptions(natsnode.WithConfigFile(conf), natsnode.WithUserPassword("admin", "a"))), conf
}

func writeNarrow(t *testing.T, conf, subscribe string) {
	t.Helper()
	users := `jetstream: enabled
authorization { users = [
{ user: admin, password: a }
{ user: narrow, password: p, permissions: { publish: { allow: [">"], deny: ["weft.denied"] }, subscribe: ["` + subscribe + `"] } }
] }
`
	if err := os.WriteFile(conf, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
}

// published counts what the server delivered on subject to seen, after a
// PONG on each connection that may have published (then the admin's own):
// a marker, not a wait.
func published(t *testing.T, seen *nats.Subscription, admin *nats.Conn, senders ...*nats.Conn) int {
	t.Helper()
	for _, nc := range append(senders, admin) {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := seen.Pending()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrentFirstRequestsWithARefusedInboxSendNothing (docs/protocol.md,
// permission_denied: "nothing reached Weft"; docs/semantics.md safety
// rule 1): several first requests at once over a fresh connection whose
// inbox prefix its user may not subscribe to are all answered
// permission_denied, and none is published. The connection holds one last
// error: on the old code one check read another's refusal, judged its own
// inbox allowed, and the requests after it were published while their
// senders were told permission_denied.
func TestConcurrentFirstRequestsWithARefusedInboxSendNothing(t *testing.T) {
	s, _ := narrowServer(t, "_INBOX.ok.>")
	subject := api.SubjectPrefix + api.EndpointStart
	seen, err := s.Conn.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	const rounds, together = 10, 8
	// One context for all rounds: on the old code a published request
	// waits for it to end, once, not once per round.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conns []*nats.Conn
	for range rounds {
		nc := s.Connect(nats.UserInfo("narrow", "p"), nats.CustomInboxPrefix("_INBOX.no"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		conns = append(conns, nc)
		errs := make([]error, together)
		var wg sync.WaitGroup
		for i := range together {
			wg.Go(func() {
				_, errs[i] = api.Request(ctx, nc, subject, []byte(`{}`))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) || !strings.Contains(err.Error(), "reply inbox _INBOX.no.") {
				t.Errorf("request %d: %v, want permission_denied naming the reply inbox", i, err)
			}
		}
	}
	if n := published(t, seen, s.Conn, conns...); n != 0 {
		t.Fatalf("%d of %d requests were published though their reply inbox was refused", n, rounds*together)
	}
}

// TestARequestAfterAReconnectToNarrowerPermissionsSendsNothing
// (docs/protocol.md, permission_denied): a connection whose inbox was
// judged allowed is asked again after it reconnects, here to a server
// that no longer lets its user subscribe there: the request is answered
// permission_denied and not published. On the old code the verdict was
// kept for the connection's life and the request was published.
func TestARequestAfterAReconnectToNarrowerPermissionsSendsNothing(t *testing.T) {
	s, conf := narrowServer(t, "_INBOX.ok.>")
	subject := "weft.test.echo"
	if _, err := s.Conn.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	nc := s.Connect(nats.UserInfo("narrow", "p"), nats.CustomInboxPrefix("_INBOX.ok"), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.Request(ctx, nc, subject, []byte(`{}`)); err != nil {
		t.Fatalf("a request whose inbox is allowed: %v", err)
	}
	writeNarrow(t, conf, "_INBOX.other.>")
	s.Restart()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the connection did not reconnect")
	}
	seen, err := s.Conn.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = api.Request(ctx, nc, subject, []byte(`{}`))
	if !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) || !strings.Contains(err.Error(), "reply inbox _INBOX.ok.") {
		t.Errorf("a request after the reconnect: %v, want permission_denied naming the reply inbox", err)
	}
	if n := published(t, seen, s.Conn, nc); n != 0 {
		t.Fatalf("the request was published after the reconnect (%d message(s)) though its reply inbox is refused", n)
	}
}

// TestConcurrentFirstRequestsWithAnAllowedInboxAreJudgedEach
// (docs/protocol.md, permission_denied): concurrent first requests over a
// fresh connection whose inbox is allowed, half to a subject its user may
// not publish to, share one inbox check and are answered each for itself
// after it — permission_denied naming the subject for those, the reply for
// the others. None publishes before the check ends, so the check never
// reads their refusals (TestAnInboxCheckAnsweredWithOtherCallsRefusalsAsksAgain
// drives that case); it passes on the code before the shared check too.
func TestConcurrentFirstRequestsWithAnAllowedInboxAreJudgedEach(t *testing.T) {
	s, _ := narrowServer(t, "_INBOX.ok.>")
	if _, err := s.Conn.Subscribe("weft.echo", func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	const rounds, together = 5, 8
	for range rounds {
		nc := s.Connect(nats.UserInfo("narrow", "p"), nats.CustomInboxPrefix("_INBOX.ok"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		errs := make([]error, together)
		var wg sync.WaitGroup
		for i := range together {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				subject := "weft.echo"
				if i%2 == 1 {
					subject = "weft.denied"
				}
				_, errs[i] = api.Request(ctx, nc, subject, []byte(`{}`))
			})
		}
		wg.Wait()
		for i, err := range errs {
			switch {
			case i%2 == 0 && err != nil:
				t.Errorf("request %d to weft.echo: %v, want the reply", i, err)
			case i%2 == 1 && (!errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) || !strings.Contains(err.Error(), "publish to weft.denied")):
				t.Errorf("request %d to weft.denied: %v, want permission_denied naming the subject", i, err)
			}
		}
	}
}

// cutDialer dials the server for real. Armed, it closes the connection in
// place of writing the next PING (that of the inbox check, whose PONG then
// never comes), once.
type cutDialer struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

func (d *cutDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, d: d}, nil
}

type cutConn struct {
	net.Conn
	d *cutDialer
}

func (c *cutConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("PING\r\n")) && c.d.armed.CompareAndSwap(true, false) {
		c.d.cuts.Add(1)
		_ = c.Conn.Close()
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// TestARequestWhoseInboxCheckLosesTheConnectionIsSentAfterTheReconnect
// (docs/protocol.md, permission_denied: api.Request publishes nothing
// without a verdict on its inbox; a connection lost while it asks is asked
// again after it reconnects): the connection drops while the first
// request's inbox check waits for its PONG; the check asks again once the
// connection is back, and the request is sent and answered. On the old
// code the request failed at once with nats.ErrConnectionClosed, though
// the connection was only reconnecting.
func TestARequestWhoseInboxCheckLosesTheConnectionIsSentAfterTheReconnect(t *testing.T) {
	s := natstest.Start(t)
	subject := "weft.test.echo"
	if _, err := s.Conn.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	d := &cutDialer{}
	nc := s.Connect(nats.SetCustomDialer(d), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := api.Request(ctx, nc, subject, []byte(`{}`))
	if err != nil {
		t.Fatalf("a request whose inbox check lost the connection: %v, want the reply after the reconnect", err)
	}
	if string(m.Data) != `{}` {
		t.Errorf("reply %q, want {}", m.Data)
	}
	if d.cuts.Load() != 1 || nc.Stats().Reconnects == 0 {
		t.Fatalf("the connection was cut %d time(s) and reconnected %d time(s), want once each: the check did not lose its connection", d.cuts.Load(), nc.Stats().Reconnects)
	}
}

// refusalDialer dials the server for real. For its first n PINGs it
// writes, it puts a publish to weft.denied (which the user "narrow" may
// not publish to) just before the PING: the server's refusal of it comes
// before the PONG and is the connection's last error then, as when
// another call's refused publish is answered during an inbox check.
type refusalDialer struct {
	n atomic.Int32
}

func (d *refusalDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &refusalConn{Conn: c, d: d}, nil
}

type refusalConn struct {
	net.Conn
	d *refusalDialer
}

func (c *refusalConn) Write(b []byte) (int, error) {
	i := bytes.Index(b, []byte("PING\r\n"))
	if i < 0 || c.d.n.Add(-1) < 0 {
		return c.Conn.Write(b)
	}
	w := append(append(append([]byte{}, b[:i]...), "PUB weft.denied 2\r\n{}\r\n"...), b[i:]...)
	if _, err := c.Conn.Write(w); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TestAnInboxCheckAnsweredWithOtherCallsRefusalsAsksAgain
// (docs/protocol.md, permission_denied: without the server's verdict
// api.Request publishes nothing, and asks again while its context lasts):
// the connection holds one last error, and another call's refused publish
// answered during the inbox check replaces the check's verdict, here four
// times in a row. The check asks again until an answer carries its
// verdict, and the request is sent and answered. On the old code it asked
// three times, then answered unavailable.
func TestAnInboxCheckAnsweredWithOtherCallsRefusalsAsksAgain(t *testing.T) {
	s, _ := narrowServer(t, "_INBOX.ok.>")
	if _, err := s.Conn.Subscribe("weft.echo", func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	d := &refusalDialer{}
	nc := s.Connect(nats.UserInfo("narrow", "p"), nats.CustomInboxPrefix("_INBOX.ok"), nats.SetCustomDialer(d), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	d.n.Store(4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.Request(ctx, nc, "weft.echo", []byte(`{}`)); err != nil {
		t.Fatalf("a request whose inbox check was answered with other calls' refusals: %v, want the reply", err)
	}
	if n := d.n.Load(); n >= 0 {
		t.Fatalf("%d of 4 refusals were not sent: the check was not answered with them", n+1)
	}
}

// TestARequestWithAnEndedContextSendsNothing (docs/protocol.md: a request
// answered with its context's error): over a connection whose inbox is
// already judged allowed, a request whose context has ended is answered
// with the context's error and not published. On the old code it was
// published, then answered with the context's error.
func TestARequestWithAnEndedContextSendsNothing(t *testing.T) {
	s := natstest.Start(t)
	subject := "weft.test.echo"
	seen, err := s.Conn.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := s.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := inboxcheck.Once(ctx, nc); err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if _, err := api.Request(ended, nc, subject, []byte(`{}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("a request with an ended context: %v, want context.Canceled", err)
	}
	if n := published(t, seen, s.Conn, nc); n != 0 {
		t.Fatalf("a request whose context had ended was published (%d message(s))", n)
	}
}
