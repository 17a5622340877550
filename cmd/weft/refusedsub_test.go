package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/roles"
)

// TestRefusedSubscriptionsAreNotAllowedAtOnce (docs/cli.md, exit 7;
// docs/protocol.md, permission_denied): on the shipped secure
// configuration, each person's role — reader, operator, custodian — with
// an inbox prefix its permissions do not allow (--inbox-prefix
// _INBOX.nobody) is refused the subscription of its calls' replies. The
// calls that subscribe end at once with permission_denied naming the
// subscription refused: `weft events` and `weft audit verify` (KV and
// stream reads, whose replies come to the connection's inbox: refused at
// connect, natsnode.Start), and client.Wait on an application's own
// connection (the follow of a run's log: an ordered consumer). Each is
// given a wait far longer than JetStream's (--timeout 1h and
// callDeadline's context): an answer that came from a wait ending would
// say so ("deadline exceeded"), and on the old code each call waited for
// that end.
func TestRefusedSubscriptionsAreNotAllowedAtOnce(t *testing.T) {
	s, auth := secureRoles(t)
	appendRunAt(t, s.Log, "pay-42", time.Now().Add(-time.Hour).Truncate(time.Second), answered("a")...)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	const prefix = "_INBOX.nobody"
	for _, role := range []roles.Role{roles.Reader, roles.Operator, roles.Custodian} {
		creds, err := auth.Write(role, api.Queue{})
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"events", "pay-42"}, {"audit", "verify", "pay-42"}} {
			t.Run(string(role)+" "+strings.Join(args, " "), func(t *testing.T) {
				ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
				defer cancel()
				var out, errb bytes.Buffer
				err := run(ctx, append(args, "--creds", creds, "--inbox-prefix", prefix, "--timeout", "1h"), &out, &errb)
				msg := errb.String() + errString(err)
				if code := exitCode(err); code != exitDenied || !strings.Contains(msg, "permission_denied") || !strings.Contains(msg, "permission to subscribe to its reply inbox "+prefix+".") {
					t.Fatalf("%s as the %s with inbox prefix %s: exit %d, want %d (permission_denied naming the subscription)\n%s%s", args[0], role, prefix, code, exitDenied, out.String(), msg)
				}
				if waitEnded(err) {
					t.Fatalf("%s as the %s answered permission_denied only once a wait ended:\n%s", args[0], role, msg)
				}
				if !strings.Contains(msg, "--inbox-prefix") {
					t.Fatalf("%s as the %s: the answer does not say how to set the inbox prefix:\n%s", args[0], role, msg)
				}
			})
		}
		t.Run(string(role)+" client.Wait", func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
			defer cancel()
			// An application's own connection (natsnode.Start would
			// refuse it: the CLI's cases above).
			nc, err := nats.Connect(s.URL, nats.UserCredentials(creds), nats.CustomInboxPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			c, err := client.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Wait(ctx, "pay-42", client.Finished)
			if !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) || !strings.Contains(err.Error(), "permission to subscribe to its reply inbox "+prefix+".") || waitEnded(err) {
				t.Fatalf("client.Wait as the %s with inbox prefix %s: %v, want permission_denied naming the subscription, at once", role, prefix, err)
			}
		})
	}
}

// TestARequestWhoseInboxIsRefusedSendsNothing (docs/protocol.md,
// permission_denied: "nothing reached Weft"): the operator, on an
// application's own connection with an inbox prefix its permissions do
// not allow, sends a start through the command API: it is answered
// permission_denied naming the reply inbox, and the start was not
// published — a runner would otherwise apply a command whose sender was
// told it was refused. A subscriber on weft.api.start (the runner's
// credentials) receives nothing; on the old code it received the start.
func TestARequestWhoseInboxIsRefusedSendsNothing(t *testing.T) {
	s, auth := secureRoles(t)
	creds, err := auth.Write(roles.Operator, api.Queue{})
	if err != nil {
		t.Fatal(err)
	}
	seen, err := s.Conn.SubscribeSync(api.SubjectPrefix + api.EndpointStart)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = seen.Unsubscribe() }()
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	const prefix = "_INBOX.nobody"
	nc, err := nats.Connect(s.URL, nats.UserCredentials(creds), nats.CustomInboxPrefix(prefix), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithDeadline(context.Background(), callDeadline(t))
	defer cancel()
	_, err = api.NewClient(nc, api.WithRetry(0)).Start(ctx, api.StartRequest{Run: "pay-99", Agent: "payment-desk", Input: "pay invoice INV-99"})
	if !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) || !strings.Contains(err.Error(), "reply inbox "+prefix+".") {
		t.Fatalf("a start with a refused reply inbox: %v, want permission_denied naming the inbox", err)
	}
	// The operator's connection has done all it will: once the runner's
	// connection has a PONG, anything the start published is delivered.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := seen.Pending(); err != nil || n != 0 {
		t.Fatalf("the start was published (%d message(s) on %s, %v) though its sender was told permission_denied", n, api.SubjectPrefix+api.EndpointStart, err)
	}
}
