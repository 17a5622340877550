package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/roles"
)

// TestSecurityWhoDidIt_AuditAsTheReaderStillChecksTheView: the reader, the
// auditor's role, may not read weft_holds (docs/security.md, "Retention and
// legal hold"). Its `audit verify` of a run whose stored view was edited
// still fails `view` (exit 4), as it did before verify read the holds: the
// refused weft_holds read does not end the command (whose context every
// later call uses), it is read after the view, and the report says the
// holds are unknown, naming permission_denied, never that there is none
// (docs/security.md, "Who did it"; docs/cli.md, audit verify). Its `audit
// export` writes a holds_unread line, which `verify --file` reports
// (holds_unknown), so that the file does not read as a run without holds.
// Before, the refusal canceled the command's context: the view was
// silently not compared and verify passed (exit 0), and the export was
// byte for byte a run without holds.
func TestSecurityWhoDidIt_AuditAsTheReaderStillChecksTheView(t *testing.T) {
	s, auth := secureRoles(t)
	ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
	defer cancel()
	pcreds, err := auth.Write(roles.Projector, api.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	pn, err := natsnode.Start(ctx, natsnode.WithURL(s.URL), natsnode.WithCredsFile(pcreds), natsnode.WithName("projector"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pn.Close(context.Background()) })
	if err := provision.EnsureOnly(ctx, pn.JetStream(), projector.Assets()); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(pctx, pn.Conn(), pn.JetStream(), eventlog.New(pn.JetStream()), nil) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			pcancel()
			<-done
		}
	}
	t.Cleanup(stop)

	appendRunAt(t, s.Log, "pay-1", time.Now().Add(-time.Hour).Truncate(time.Second), answered("a")...)
	if _, err := retention.Place(ctx, s.JS, "", "pay-1", retention.Person{By: "legal"}, "dispute D-17", time.Now()); err != nil {
		t.Fatal(err)
	}
	h, err := s.Log.Head(ctx, "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	// The projector's credentials read and write the views (the runner's,
	// s.JS, may not).
	views, err := pn.JetStream().KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	var stored projections.RunView
	for stored.Version < h.Version {
		e, err := views.Get(ctx, "pay-1")
		if err == nil {
			if stored, err = projections.DecodeView(e.Value()); err != nil {
				t.Fatal(err)
			}
		}
		if ctx.Err() != nil {
			// ctx's deadline (callDeadline) bounds this wait.
			t.Fatalf("the projector never stored the view of pay-1 at version %d (at %d): %v", h.Version, stored.Version, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	// The stored view edited: the run reads cancelled, the log says finished.
	stored.Status = "cancelled"
	b, err := stored.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := views.Put(ctx, "pay-1", b); err != nil {
		t.Fatal(err)
	}

	reader, err := auth.Write(roles.Reader, api.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("NATS_CREDS", reader)

	var out, errb bytes.Buffer
	err = run(ctx, []string{"audit", "verify", "pay-1"}, &out, &errb)
	if code := exitCode(err); code != exitAudit {
		t.Fatalf("audit verify of an edited view as the reader: exit %d, want %d\n%s%s%s", code, exitAudit, out.String(), errb.String(), errString(err))
	}
	contains(t, "audit verify as the reader", errString(err), "view: the stored view differs", "status cancelled")
	contains(t, "audit verify as the reader", out.String(), "note: the run's legal holds are unknown (", "permission_denied", "KV_weft_holds")

	out.Reset()
	errb.Reset()
	err = run(ctx, []string{"audit", "verify", "--json", "pay-1"}, &out, &errb)
	if code := exitCode(err); code != exitAudit {
		t.Fatalf("audit verify --json as the reader: exit %d, want %d\n%s%s%s", code, exitAudit, out.String(), errb.String(), errString(err))
	}
	var rep audit.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("audit verify --json: %v\n%s", err, out.String())
	}
	if rep.Problem == nil || rep.Problem.Kind != audit.KindView {
		t.Fatalf("audit verify --json as the reader: problem %+v, want kind %s", rep.Problem, audit.KindView)
	}
	contains(t, "audit verify --json as the reader: holds_unknown", rep.HoldsUnknown, "permission_denied")

	// The reader's export says its holds are unknown; verify --file says so.
	path := filepath.Join(t.TempDir(), "pay-1.jsonl")
	out.Reset()
	errb.Reset()
	if err := run(ctx, []string{"audit", "export", "pay-1", "-o", path}, &out, &errb); err != nil {
		t.Fatalf("audit export as the reader: %v\n%s", err, errb.String())
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "the reader's export", string(file), `{"run":"pay-1","schema":1,"holds_unread":"`, "permission_denied")
	out.Reset()
	errb.Reset()
	if err := run(ctx, []string{"audit", "verify", "--file", path}, &out, &errb); err != nil {
		t.Fatalf("audit verify --file of the reader's export: %v\n%s%s", err, out.String(), errb.String())
	}
	contains(t, "audit verify --file of the reader's export", out.String(),
		"note: the run's legal holds are unknown (the export could not read them: ", "permission_denied", "ok: run pay-1")
}
