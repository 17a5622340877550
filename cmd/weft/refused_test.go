package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/worker"
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
	runner, err := auth.Write(roles.Runner, worker.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithConfigFile(filepath.Join(dir, "nats-secure.conf")), natsnode.WithCredsFile(runner)))
	return s, auth
}

// TestReadersJetStreamCallsAreNotAllowedAtOnce (docs/cli.md, exit 7;
// docs/protocol.md, permission_denied): a reader's KV and stream calls
// that the server refuses — a hold, its release, the list of holds, a
// retention apply — end at once with permission_denied naming the
// $JS.API subject the server refused, never a wait that ended. The
// commands run with --timeout and a context far longer than the test
// may take (an hour, or the test's own deadline): an answer that
// came from a wait ending would say so ("deadline exceeded"), and on the
// old code each call waited for that end.
func TestReadersJetStreamCallsAreNotAllowedAtOnce(t *testing.T) {
	s, auth := secureRoles(t)
	reader, err := auth.Write(roles.Reader, worker.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	appendRunAt(t, s.Log, "pay-42", time.Now().Add(-72*time.Hour).Truncate(time.Second), answered("a")...)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("NATS_CREDS", reader)
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	for _, c := range []struct {
		name    string
		args    []string
		subject string
	}{
		{"hold", []string{"hold", "pay-42", "--reason", "dispute D-17", "--by", "legal"}, "KV_weft_holds"},
		{"release", []string{"hold", "--release", "pay-42", "--reason", "closed", "--by", "legal"}, "KV_weft_holds"},
		{"hold list", []string{"hold", "list"}, "KV_weft_holds"},
		{"retention apply", []string{"retention", "apply", "--older-than", "48h"}, "KV_weft_"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			var out, errb bytes.Buffer
			err := run(ctx, append(c.args, "--timeout", "1h"), &out, &errb)
			msg := errb.String() + errString(err)
			if code := exitCode(err); code != exitDenied || !strings.Contains(msg, "permission_denied") || !strings.Contains(msg, "permission to publish to $JS.API.") || !strings.Contains(msg, c.subject) {
				t.Fatalf("%s as the reader: exit %d, want %d (permission_denied naming %s)\n%s%s", c.name, code, exitDenied, c.subject, out.String(), msg)
			}
			if waitEnded(err) {
				t.Fatalf("%s as the reader answered permission_denied only once a wait ended:\n%s", c.name, msg)
			}
		})
	}
}

// TestAuditsRefusedReadIsNotAllowedAtOnce (docs/cli.md, exit 7): an
// export of a range by credentials that may not read the views ends at
// once with permission_denied naming the refused $JS.API subject, never a
// wait that ended (the call is given an hour, or the test's deadline).
func TestAuditsRefusedReadIsNotAllowedAtOnce(t *testing.T) {
	restricted(t, map[string][]string{"noviews": {"$JS.API.STREAM.INFO.KV_weft_views"}})
	t.Setenv("NATS_USER", "noviews")
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, []string{"audit", "export", "--since", "2020-01-01", "--until", "2030-01-01", "-o", filepath.Join(t.TempDir(), "range.jsonl"), "--timeout", "1h"}, &out, &errb)
	msg := errb.String() + errString(err)
	if code := exitCode(err); code != exitDenied || !strings.Contains(msg, "permission to publish to $JS.API.STREAM.INFO.KV_weft_views") || waitEnded(err) {
		t.Fatalf("audit export without the views: exit %d, want %d (permission_denied at once)\n%s%s", code, exitDenied, out.String(), msg)
	}
}
