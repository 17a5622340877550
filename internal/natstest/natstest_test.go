package natstest_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

func TestStartProvisionsAndRestartKeepsStoreAndURL(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(provision.KV(jetstream.KeyValueConfig{Bucket: "weft_natstest"})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{provision.EventsStream, provision.TasksStream, "KV_weft_natstest"} {
		if _, err := s.JS.Stream(ctx, name); err != nil {
			t.Fatalf("asset %s: %v", name, err)
		}
	}
	_, h, err := s.Log.Append(ctx, "r", eventlog.Head{}, time.Unix(0, 0), events.ModelRequested{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL
	s.Restart()
	if s.URL != url {
		t.Fatalf("URL changed over restart: %s -> %s", url, s.URL)
	}
	got, err := s.Log.Head(ctx, "r")
	if err != nil || got != h {
		t.Fatalf("head after restart %+v, %v; want %+v", got, err, h)
	}
	other := s.Connect()
	if !other.IsConnected() {
		t.Fatal("second connection not connected")
	}
}

// CrashRestart forgets the deliveries made since SaveDeliveryState, as a
// server killed before writing its consumer state does: a message taken
// (and never acknowledged) before the crash is delivered again as a first
// delivery, while the messages themselves survive. A plain Restart keeps
// the count (the redelivery is delivery 2).
func TestCrashRestartForgetsDeliveries(t *testing.T) {
	for _, crash := range []bool{false, true} {
		s := natstest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg := jetstream.ConsumerConfig{Durable: "c", FilterSubject: "weft.task.x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second}
		c, err := s.JS.CreateOrUpdateConsumer(ctx, provision.TasksStream, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := s.SaveDeliveryState()
		if _, err := s.JS.Publish(ctx, "weft.task.x", []byte("a")); err != nil {
			t.Fatal(err)
		}
		first := fetch(t, c)
		if first != 1 {
			t.Fatalf("first delivery %d", first)
		}
		time.Sleep(300 * time.Millisecond) // the server writes its consumer state
		if crash {
			s.CrashRestart(st)
		} else {
			s.Restart()
		}
		if c, err = s.JS.Consumer(ctx, provision.TasksStream, "c"); err != nil {
			t.Fatal(err)
		}
		want := map[bool]uint64{false: 2, true: 1}[crash]
		if got := fetch(t, c); got != want {
			t.Fatalf("crash %v: delivery after the restart %d, want %d", crash, got, want)
		}
	}
}

func fetch(t *testing.T, c jetstream.Consumer) uint64 {
	t.Helper()
	b, err := c.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		return md.NumDelivered
	}
	t.Fatalf("no message: %v", b.Error())
	return 0
}

// A test's clients reach only its own server. Two tests' servers can end
// up on one port (a server that Stop or Restart keeps its port for loses
// it meanwhile to another test's server): a client of A, reconnecting to
// A's address, then reaches B, with the same streams, and would work on
// another test's data while it reported on its own (the chaos harness
// once reported starts acknowledged and lost that way). Each server
// requires its own token, carried in its URL: a client with A's URL at
// B's address is refused (authorization violation); at A's it works.
func TestAClientOfOneServerIsRefusedByAnother(t *testing.T) {
	a, b := natstest.Start(t), natstest.Start(t)
	if a.Token == "" || a.Token == b.Token {
		t.Fatalf("tokens %q and %q: each server needs its own", a.Token, b.Token)
	}
	ua, err := url.Parse(a.URL)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	own, err := nats.Connect(a.URL, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("a client with A's URL at A: %v", err)
	}
	own.Close()
	foreign := *ua
	foreign.Host = ub.Host // A's URL, with B on its port
	nc, err := nats.Connect(foreign.String(), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatalf("a client with A's URL reached B at %s", ub.Host)
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client with A's URL at B: %v, want an authorization violation", err)
	}
}
