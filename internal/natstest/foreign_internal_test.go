package natstest

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The port-reuse failure itself: while a server is down (Stop, before
// StartAgain on the same port) another test's server takes its port. A
// client of the first, reconnecting to the address it knows, must not
// work against the second (same streams, another test's data): the
// second refuses it (authorization violation). The client sets
// nats.IgnoreAuthErrorAbort, so it keeps trying its own address and is
// back on its own server once that one is up again (without it nats.go
// closes the connection after the second refusal: loud too, see the
// package doc).
func TestAClientWhoseServerLostItsPortIsRefusedByTheNewcomer(t *testing.T) {
	a := Start(t)
	refused := make(chan struct{}, 1)
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(a.URL, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.IgnoreAuthErrorAbort(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a.Stop()
	b := Start(t, withPort(a.port)) // another test's server, on a's port
	select {
	case <-refused:
	case <-reconnected:
		t.Fatalf("a's client reconnected to b (server %s)", nc.ConnectedServerName())
	case <-time.After(30 * time.Second):
		t.Fatal("a's client was never refused by b")
	}
	if nc.IsConnected() {
		t.Fatalf("a's client is connected to %s", nc.ConnectedServerId())
	}
	b.stop()
	a.StartAgain()
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("a's client did not come back to a")
	}
	if _, err := nc.Request("$JS.API.INFO", nil, 5*time.Second); err != nil || nc.ConnectedServerId() != a.node.Conn().ConnectedServerId() {
		t.Fatalf("a's client after a is back: %v, server %s, want a's %s", err, nc.ConnectedServerId(), a.node.Conn().ConnectedServerId())
	}
}
