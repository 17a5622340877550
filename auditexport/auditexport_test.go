package auditexport_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/auditexport"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/retention"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// repairedAndHeld appends two events to run, then a message no reader
// folds, voided (`weft repair drop`, docs/adr/0011), and places a legal
// hold on it (docs/adr/0030).
func repairedAndHeld(t *testing.T, s *natstest.Server, run string) {
	t.Helper()
	ctx := ctxT(t)
	if _, _, err := s.Log.Append(ctx, run, eventlog.Head{}, t0, events.ModelRequested{Turn: 1, Incarnation: 1}, events.ModelRequested{Turn: 2, Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	ack, err := s.JS.PublishMsg(ctx, &nats.Msg{Subject: eventlog.Subject(run), Data: []byte("<html>")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log.Void(ctx, run, ack.Sequence, "test junk", "tester", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Place(ctx, s.JS, "c-1", run, retention.Person{By: "carol"}, "dispute D-17", t0); err != nil {
		t.Fatal(err)
	}
}

// TestReadIsWhatTheExportHolds (docs/cli.md, audit export): Read returns a
// run's events, its void records and its legal holds as weft_holds keeps
// them, and Run.Write is audit.ExportRun of those — the file audit's
// reader reads back with the void record and the hold.
func TestReadIsWhatTheExportHolds(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(retention.Assets()...))
	ctx := ctxT(t)
	const run = "ex-1"
	repairedAndHeld(t, s, run)
	envs, _, err := s.Log.Load(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	voids, err := s.Log.Voids(ctx, run)
	if err != nil || len(voids) != 1 {
		t.Fatalf("voids %v %v", voids, err)
	}
	stored, err := retention.HoldsOf(ctx, s.JS, run)
	if err != nil || len(stored) != 1 {
		t.Fatalf("holds %v %v", stored, err)
	}
	var want bytes.Buffer
	if err := audit.ExportRun(&want, envs, voids, stored, ""); err != nil {
		t.Fatal(err)
	}

	x, err := auditexport.Read(ctx, s.JS, run)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := x.Write(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("Read's export:\n%s\nwant audit.ExportRun of the run's parts:\n%s", got.Bytes(), want.Bytes())
	}
	runs, err := audit.ReadRuns(&got)
	if err != nil || len(runs) != 1 {
		t.Fatalf("read back: %v %v", runs, err)
	}
	if r := runs[0]; len(r.Events) != 2 || len(r.Voids) != 1 || len(r.Holds) != 1 || r.Holds[0].By != "carol" || r.HoldsUnread != "" {
		t.Fatalf("read back: %d events, voids %v, holds %+v, unread %q", len(r.Events), r.Voids, r.Holds, r.HoldsUnread)
	}
	if m := x.Manifest(); m.Run != run || m.Version != 2 || m.Voids != 1 || m.Holds != 1 {
		t.Fatalf("manifest entry %+v", m)
	}
}

// TestReadLeavesOutARunPurgedBetweenItsReads (docs/cli.md, audit export of
// a range): a run whose events and void records a purge removes after
// Read read its events is read as gone (no events, no error), never as
// its events without its void records; a run never written is read the
// same, and a bad run id is invalid_name.
func TestReadLeavesOutARunPurgedBetweenItsReads(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(retention.Assets()...))
	ctx := ctxT(t)
	const run = "ex-2"
	repairedAndHeld(t, s, run)
	var steps []string
	x, err := auditexport.Read(ctx, s.JS, run, auditexport.AfterRead(func(step string) error {
		steps = append(steps, step)
		if step != "events" {
			return nil
		}
		st, err := s.JS.Stream(ctx, eventlog.Stream)
		if err != nil {
			return err
		}
		return st.Purge(ctx, jetstream.WithPurgeSubject(eventlog.RunFilter(run)))
	}))
	if err != nil || len(x.Events) != 0 || len(x.Voids) != 0 || len(x.Holds) != 0 {
		t.Fatalf("a run purged while read: %d events, %d voids, %d holds, %v; want none", len(x.Events), len(x.Voids), len(x.Holds), err)
	}
	if len(steps) != 2 || steps[0] != "events" || steps[1] != "voids" {
		t.Fatalf("AfterRead steps %v", steps)
	}
	if x, err := auditexport.Read(ctx, s.JS, "never-1"); err != nil || len(x.Events) != 0 {
		t.Fatalf("a run never written: %d events, %v", len(x.Events), err)
	}
	if _, err := auditexport.Read(ctx, s.JS, "no such run"); !errors.Is(err, &weft.Error{Code: weft.CodeInvalidName}) {
		t.Fatalf("a bad run id: %v, want invalid_name", err)
	}
}

// TestReadExportsALiveRunAsLoaded (docs/cli.md, audit export): a run that
// appends while Read reads it — an event after each load, and once a
// message no reader folds with its void record (`weft repair drop`) — is
// exported as its one load read it: those events, no void record beyond
// them (it voids a message after the history's end), no second read and
// no error; the file reads back so.
func TestReadExportsALiveRunAsLoaded(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(retention.Assets()...))
	ctx := ctxT(t)
	const run = "ex-3"
	loaded, _, err := s.Log.Append(ctx, run, eventlog.Head{}, t0, events.ModelRequested{Turn: 1, Incarnation: 1}, events.ModelRequested{Turn: 2, Incarnation: 1})
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	loads := 0
	x, err := auditexport.Read(ctx, s.JS, run, auditexport.AfterRead(func(step string) error {
		steps = append(steps, step)
		if step != "events" {
			return nil
		}
		loads++
		_, h, err := s.Log.Load(ctx, run)
		if err != nil {
			return err
		}
		if _, _, err := s.Log.Append(ctx, run, h, t0, events.ModelRequested{Turn: int64(2 + loads), Incarnation: 1}); err != nil {
			return err
		}
		if loads > 1 {
			return nil
		}
		ack, err := s.JS.PublishMsg(ctx, &nats.Msg{Subject: eventlog.Subject(run), Data: []byte("<html>")})
		if err != nil {
			return err
		}
		_, err = s.Log.Void(ctx, run, ack.Sequence, "test junk", "tester", t0)
		return err
	}))
	if err != nil {
		t.Fatalf("a run appended to while read: %v; want it exported as loaded", err)
	}
	if loads != 1 || len(steps) != 2 {
		t.Fatalf("AfterRead steps %v: the run was read %d times, want once", steps, loads)
	}
	if len(x.Events) != len(loaded) || x.Events[len(x.Events)-1].Hash() != loaded[len(loaded)-1].Hash() {
		t.Fatalf("exported %d events, want the %d loaded", len(x.Events), len(loaded))
	}
	if len(x.Voids) != 0 {
		t.Fatalf("exported void records %+v of messages after the events read; want none", x.Voids)
	}
	if voids, err := s.Log.Voids(ctx, run); err != nil || len(voids) != 1 {
		t.Fatalf("the log's void records %v %v; want the one appended during the read", voids, err)
	}
	var b bytes.Buffer
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	runs, err := audit.ReadRuns(&b)
	if err != nil || len(runs) != 1 || len(runs[0].Events) != len(loaded) || len(runs[0].Voids) != 0 {
		t.Fatalf("read back: %v %v", runs, err)
	}
}
