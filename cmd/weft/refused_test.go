package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
	"github.com/weftrun/weft/roles"
)

// secureRoles starts a server from the repository's secure configuration
// (nats-secure.conf, a fresh authority as `weft roles init` writes it),
// provisioned with the runner's credentials, and returns its URL and the
// authority that issues each role's credentials.
func secureRoles(t *testing.T) (*natstest.Server, *roles.Authority) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"nats.conf", "nats-secure.conf"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := roles.Open(filepath.Join(dir, "secure"))
	if err != nil {
		t.Fatal(err)
	}
	runner, err := auth.Write(roles.Runner, api.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithConfigFile(filepath.Join(dir, "nats-secure.conf")), natsnode.WithCredsFile(runner)))
	return s, auth
}

// callDeadline is the deadline of one refused call of a test: two minutes,
// far above JetStream's 5 s default wait, so that a call that waited
// ends "deadline exceeded" (waitEnded) instead of permission_denied; and
// well before the test binary's own deadline, so that one such failure
// leaves the next call of the test its own time (not a timing assertion:
// a bound).
func callDeadline(t *testing.T) time.Time {
	deadline := time.Now().Add(2 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-10*time.Second).Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	return deadline
}

// TestReadersJetStreamCallsAreNotAllowedAtOnce (docs/cli.md, exit 7;
// docs/protocol.md, permission_denied): a reader's calls that the server
// refuses — a hold and its release (commands: weft.api.hold,
// weft.api.release_hold), the list of holds and a retention apply (KV and
// stream calls) — end at once with permission_denied naming the subject
// the server refused, never a wait that ended. The
// commands run with --timeout 1h and each with a context of its own far
// longer than JetStream's wait (callDeadline): an answer that came from
// a wait ending would say so ("deadline exceeded"), and on the old code
// each call waited for that end.
func TestReadersJetStreamCallsAreNotAllowedAtOnce(t *testing.T) {
	s, auth := secureRoles(t)
	reader, err := auth.Write(roles.Reader, api.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	appendRunAt(t, s.Log, "pay-42", time.Now().Add(-72*time.Hour).Truncate(time.Second), answered("a")...)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("NATS_CREDS", reader)
	for _, c := range []struct {
		name    string
		args    []string
		subject []string // what the answer names of the subject refused
		hint    string   // the roles the answer names, a person's first
	}{
		// A hold and its release are commands (weft.api.hold): the
		// request answers its own refusal (api.Request).
		{"hold", []string{"hold", "pay-42", "--reason", "dispute D-17", "--by", "legal"}, []string{"permission to publish to weft.api.hold"}, "the credentials of role custodian may"},
		{"release", []string{"hold", "--release", "pay-42", "--reason", "closed", "--by", "legal"}, []string{"permission to publish to weft.api.release_hold"}, "the credentials of role custodian may"},
		{"hold list", []string{"hold", "list"}, []string{"permission to publish to $JS.API.STREAM.", "KV_weft_holds"}, "the credentials of role custodian or runner may"},
		{"retention apply", []string{"retention", "apply", "--older-than", "48h"}, []string{"permission to publish to $JS.API.STREAM.", "KV_weft_"}, "the credentials of role custodian"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
			defer cancel()
			var out, errb bytes.Buffer
			err := run(ctx, append(c.args, "--timeout", "1h"), &out, &errb)
			msg := errb.String() + errString(err)
			if code := exitCode(err); code != exitDenied || !strings.Contains(msg, "permission_denied") || !containsAll(msg, c.subject) {
				t.Fatalf("%s as the reader: exit %d, want %d (permission_denied naming %s)\n%s%s", c.name, code, exitDenied, c.subject, out.String(), msg)
			}
			if waitEnded(err) {
				t.Fatalf("%s as the reader answered permission_denied only once a wait ended:\n%s", c.name, msg)
			}
			if !strings.Contains(msg, c.hint) {
				t.Fatalf("%s as the reader: the answer does not say %q:\n%s", c.name, c.hint, msg)
			}
		})
	}
}

// TestAuditsRefusedReadIsNotAllowedAtOnce (docs/cli.md, exit 7): an
// export of a range by credentials that may not read the views ends at
// once with permission_denied naming the refused $JS.API subject, never a
// wait that ended (the call is given callDeadline's two minutes).
func TestAuditsRefusedReadIsNotAllowedAtOnce(t *testing.T) {
	restricted(t, map[string][]string{"noviews": {"$JS.API.STREAM.INFO.KV_weft_views"}})
	t.Setenv("NATS_USER", "noviews")
	ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, []string{"audit", "export", "--since", "2020-01-01", "--until", "2030-01-01", "-o", filepath.Join(t.TempDir(), "range.jsonl"), "--timeout", "1h"}, &out, &errb)
	msg := errb.String() + errString(err)
	if code := exitCode(err); code != exitDenied || !strings.Contains(msg, "permission to publish to $JS.API.STREAM.INFO.KV_weft_views") || waitEnded(err) {
		t.Fatalf("audit export without the views: exit %d, want %d (permission_denied at once)\n%s%s", code, exitDenied, out.String(), msg)
	}
}

// TestShowAsTheReaderSaysTheHoldIsUnknown (docs/cli.md, show;
// docs/security.md, "Retention and legal hold"): on the shipped secure
// configuration, the reader may not read weft_holds, and its `weft show`
// still shows the run, says `hold       unknown (cannot read weft_holds:
// permission_denied: … $JS.API.STREAM.INFO.KV_weft_holds)` — never that
// the run has none, never a wait that ended — and exits 0: the refusal of
// the holds' read does not end show as a refused call ends other commands
// (readHold's own watch; env.tolerates).
func TestShowAsTheReaderSaysTheHoldIsUnknown(t *testing.T) {
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
	t.Cleanup(func() { pcancel(); <-done })
	// A hold on the run, so that "none" would be a lie.
	appendRunAt(t, s.Log, "pay-42", time.Now().Add(-time.Hour).Truncate(time.Second), answered("a")...)
	if _, err := retention.Place(ctx, s.JS, "", "pay-42", retention.Person{By: "legal"}, "dispute D-17", time.Now()); err != nil {
		t.Fatal(err)
	}
	h, err := s.Log.Head(ctx, "pay-42")
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for {
		cp, err := projector.ReadCheckpoint(ctx, pn.JetStream())
		if err != nil {
			// ctx's deadline (callDeadline) bounds this wait too.
			t.Fatalf("reading the projector's checkpoint (want the log's seq %d, the hold's run; last seen %d): %v", h.Seq, last, err)
		}
		if last = cp.Seq; last >= h.Seq {
			break
		}
		time.Sleep(20 * time.Millisecond)
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
	err = run(ctx, []string{"show", "pay-42"}, &out, &errb)
	if code := exitCode(err); code != 0 {
		t.Fatalf("show as the reader: exit %d, want 0\n%s%s%s", code, out.String(), errb.String(), errString(err))
	}
	contains(t, "show as the reader", out.String(), "pay-42")
	contains(t, "show as the reader", out.String(), "hold       unknown (cannot read weft_holds: permission_denied: ")
	contains(t, "show as the reader", out.String(), "$JS.API.STREAM.INFO.KV_weft_holds)")
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
