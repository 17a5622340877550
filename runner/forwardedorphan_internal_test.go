package runner

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a run can always be answered): a driver entry whose
// acquisition was forwarded to the owner of its partition as read (the
// partition moved on since the scan listed it) counts as woken only when
// that owner is judged alive by a successful read of its liveness key. An
// owner whose key is absent, or cannot be read, wakes nothing: the wake
// failed (the partition stays due), and once it has kept failing for
// orphanWarnAfter the Warn names the absent key.
func TestSemantics8_AnEntryForwardedToAnAbsentOwnerIsNotWoken(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	r, live, clk := judgeRig(t, srv, srv.Conn, time.Second)
	var buf bytes.Buffer
	r.log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := live.Put(c, "owner-alive", []byte(`{"schema":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.forwardedOrphan(c, "owner-alive"); err != nil {
		t.Fatalf("forwarded to an owner whose key was read: %v, want woken (nil)", err)
	}
	absent := r.forwardedOrphan(c, "owner-gone")
	if absent == nil || !strings.Contains(absent.Error(), "liveness key is absent") {
		t.Fatalf("forwarded to an owner whose key is absent: %v, want a failed wake saying so", absent)
	}
	done, stop := context.WithCancel(c)
	stop()
	if err := r.forwardedOrphan(done, "owner-alive"); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("forwarded to an owner whose key cannot be read: %v, want a failed wake (cannot tell is never done)", err)
	}
	k := driverKey{driver: "runner-dead", revision: 3}
	r.noteOrphanFailing("r1", k, absent)
	clk.Advance(r.orphanWarnAfter())
	r.noteOrphanFailing("r1", k, absent)
	if out := buf.String(); strings.Count(out, "keeps failing") != 1 || !strings.Contains(out, "owner-gone") || !strings.Contains(out, "liveness key is absent") {
		t.Fatalf("after %s of forwards to an absent owner: want one Warn naming it: %s", r.orphanWarnAfter(), out)
	}
}
