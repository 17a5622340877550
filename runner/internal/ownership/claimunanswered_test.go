package ownership

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a run can always be answered: a gone runner's
// partitions are claimed by the next rounds of rebalancing): a claim whose
// Create meets a key that exists reads the key from the stream's leader
// (partitionKey) with the round's context, which has no deadline. The
// server's answer to that read is lost (the server, as this runner sees it,
// pauses: its connection delivers nothing more). The claim still ends — the
// read is bounded whatever the caller's context — and the table is left as
// it was, the partition claimed again at a later round. Before, the claim
// waited for the answer for ever, and with it the round of rebalancing.
func TestSemantics8_AClaimWhoseKeyReadIsNeverAnsweredEnds(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	const p = 1
	rev, err := kv.Put(c, Key(p), []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	conn, pause := pausable(t, srv.Conn.ConnectedUrl(), srv.Token)
	r := NewTable(TableConfig{ID: "me", Partitions: 4, Conn: conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
	pause()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.claim(context.Background(), p, 0, "") // the round's context: no deadline
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("a claim whose key read is never answered has not ended")
	}
	if o, _ := r.OwnerOf(p); o == "me" {
		t.Fatalf("partition %d owned by this runner after a refused claim", p)
	}
	e, err := kv.Get(c, Key(p))
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "other" || e.Revision() != rev {
		t.Fatalf("partition %d's key is %q at %d, want other at %d", p, e.Value(), e.Revision(), rev)
	}
}

// pausable connects to the server at url (with its token) through a relay in this process,
// and returns the connection and pause: after pause, whatever the server
// sends is dropped (its answers are lost), as from a server paused or
// restarted while a request waits.
func pausable(t *testing.T, url, token string) (*nats.Conn, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		paused atomic.Bool
		mu     sync.Mutex
		conns  []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			cl, err := l.Accept()
			if err != nil {
				return
			}
			sv, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
			if err != nil {
				cl.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, cl, sv)
			mu.Unlock()
			go func() { _, _ = io.Copy(sv, cl) }()
			go func() {
				buf := make([]byte, 32*1024)
				for {
					n, err := sv.Read(buf)
					if n > 0 && !paused.Load() {
						if _, werr := cl.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	nc, err := nats.Connect("nats://"+l.Addr().String(), nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, func() { paused.Store(true) }
}
