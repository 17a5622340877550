package mcpops_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/mcpops"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/roles"
)

// sessionOn connects an MCP client to a new operator server over nc, in
// memory.
func sessionOn(t *testing.T, nc *nats.Conn, cfg mcpops.Config) *mcp.ClientSession {
	t.Helper()
	s, err := mcpops.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "assistant", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// secureDev is `weft dev --secure --require-identity`
// (consolestack.Dev): its one person key is the approver's
// (<roles>/approver.nk); the stack's connection has the operator's
// credentials.
func secureDev(t *testing.T) *consolestack.Stack {
	t.Helper()
	s, err := consolestack.Dev(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestSecurityWhoDidIt_OperatorMCPSignedReconcile (docs/security.md, "Who
// did it"; docs/mcp.md, "Operate"): on a deployment that requires
// identities, weft_reconcile takes the CLI's identity inputs. Without a
// proof it is refused identity_required, whatever by names, and nothing
// is recorded; with the command proof `weft reconcile --signing-key KEY
// --print-proof` prints (proof.NewCommand, proof.SignCommand with a
// person key) and the same reason, it is recorded as the key's person,
// verified, with the key. Before, the tool had no proof or reason field
// and was always refused there. The content is the tool's output with
// its keys out of sorted order ({"status":…,"id":…}): the proof states
// the SHA-256 of the content as signed, and the MCP SDK hands the handler
// its input re-encoded (keys sorted), so this passes only because the
// server sends the content as the call sent it (sentField); sending the
// re-encoded content is refused proof_refused(other_content). A signed
// weft_cancel (a cancel proof: no action, no content) is recorded
// verified too. And an operator MCP server whose connection has the
// reader's credentials answers a signed weft_cancel permission_denied
// naming the subject and role operator, at once (docs/mcp.md: "with a
// reader's credentials an answer is refused permission_denied at once").
func TestSecurityWhoDidIt_OperatorMCPSignedReconcile(t *testing.T) {
	s := secureDev(t)
	kp, pub := s.ApproverKey(t)
	s.Start(t, "mcp-13", "pay invoice INV-13", "suspended")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rw := sessionOn(t, s.NC, mcpops.Config{Answers: true, NoRetry: true})
	content := json.RawMessage(`{"status":"sent","id":"pay-13"}`)
	in := map[string]any{"run": "mcp-13", "action": "2/call_2_1", "content": content, "reason": "bank ticket 7", "by": "mallory", "command_id": "mcp-rec-1"}
	var reply api.Reply
	if err := call(ctx, rw, mcpops.ToolReconcile, in, &reply); err == nil || !strings.HasPrefix(err.Error(), "identity_required") {
		t.Fatalf("an unsigned reconcile: %v, want identity_required", err)
	}
	if n := len(s.History(t, "mcp-13", events.NameReconciled)); n != 0 {
		t.Fatalf("%d reconciliations recorded, want none", n)
	}
	p, err := proof.NewCommand(proof.CommandSubject{Command: proof.CommandReconcile, Run: "mcp-13", Action: "2/call_2_1", Content: content, Reason: "bank ticket 7"}, pub, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	delete(in, "by")
	in["proof"], in["command_id"] = p, "mcp-rec-2"
	if err := call(ctx, rw, mcpops.ToolReconcile, in, &reply); err != nil {
		t.Fatalf("a signed reconcile: %v", err)
	}
	a := consolestack.Action(t, s.WaitStatus(t, "mcp-13", "finished"), "2/call_2_1")
	if r := a.Reconciled; r == nil || !r.Verified || r.Key != pub || r.By != "demo approver" || r.Reason != "bank ticket 7" {
		t.Fatalf("reconciled %+v, want verified by demo approver with key %s for bank ticket 7", r, pub)
	}

	reader, err := natsnode.Start(ctx, natsnode.WithURL(s.NATSURL), natsnode.WithCredsFile(filepath.Join(s.Roles, roles.CredsFile(roles.Reader, api.Queue{}))),
		natsnode.WithNATSOptions(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	ro := sessionOn(t, reader.Conn(), mcpops.Config{Answers: true, NoRetry: true})
	s.Start(t, "mcp-14", "pay invoice INV-13", "suspended")
	cp := signedCancel(t, kp, pub, "mcp-14", "duplicate invoice")
	err = call(ctx, ro, mcpops.ToolCancel, map[string]any{"run": "mcp-14", "reason": "duplicate invoice", "proof": cp}, &reply)
	if err == nil || !strings.HasPrefix(err.Error(), "permission_denied") || !strings.Contains(err.Error(), "publish to weft.api.cancel; the credentials of role operator may") {
		t.Fatalf("weft_cancel with the reader's credentials: %v, want permission_denied naming weft.api.cancel and role operator", err)
	}
	if err := call(ctx, rw, mcpops.ToolCancel, map[string]any{"run": "mcp-14", "reason": "duplicate invoice", "proof": cp, "command_id": "mcp-cancel-1"}, &reply); err != nil {
		t.Fatalf("a signed cancel: %v", err)
	}
	if c := s.WaitStatus(t, "mcp-14", "finished").Cancelled; c == nil || !c.Verified || c.Key != pub || c.By != "demo approver" || c.Reason != "duplicate invoice" {
		t.Fatalf("cancelled %+v, want verified by demo approver with key %s for duplicate invoice", c, pub)
	}
}

// signedCancel is the command proof `weft cancel RUN --reason REASON
// --signing-key KEY --print-proof` prints.
func signedCancel(t *testing.T, kp nkeys.KeyPair, pub, run, reason string) events.CommandProof {
	t.Helper()
	p, err := proof.NewCommand(proof.CommandSubject{Command: proof.CommandCancel, Run: run, Reason: reason}, pub, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	return p
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSecurityWhoDidIt_OperatorMCPRecordsTheTokensPrincipal
// (docs/security.md, "Who did it"; docs/mcp.md, "Operate"): over HTTP
// with bearer tokens (weft mcp operator --tokens), the principal the
// token authenticated is the by of a cancel, unverified: a call that
// names nobody is recorded as the principal, and one whose by names
// someone else is refused invalid_request, nothing recorded. Before, the
// typed by was recorded (and none when none was typed).
func TestSecurityWhoDidIt_OperatorMCPRecordsTheTokensPrincipal(t *testing.T) {
	st := stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := mcpops.New(st.Server.Conn, mcpops.Config{Answers: true, NoRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "tok-alice" {
			return &auth.TokenInfo{UserID: "alice"}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	h := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, nil))
	hs := httptest.NewServer(h)
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "assistant", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearer{"tok-alice"}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	if _, err := st.API.Start(ctx, api.StartRequest{Run: "ops-who", Agent: "desk", Input: "pay INV-7"}); err != nil {
		t.Fatal(err)
	}
	pending(ctx, t, cs, "ops-who")
	var reply api.Reply
	if err := call(ctx, cs, mcpops.ToolCancel, map[string]any{"run": "ops-who", "reason": "duplicate", "by": "mallory"}, &reply); err == nil || !strings.HasPrefix(err.Error(), "invalid_request") {
		t.Fatalf("a by that is not the token's principal: %v, want invalid_request", err)
	}
	if err := call(ctx, cs, mcpops.ToolCancel, map[string]any{"run": "ops-who", "reason": "duplicate"}, &reply); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	v := st.Wait(t, "ops-who", func(v projections.RunView) bool { return v.Cancelled != nil })
	if c := v.Cancelled; c.By != "alice" || c.Verified || c.Reason != "duplicate" {
		t.Fatalf("cancelled %+v, want by alice, unverified, for duplicate", c)
	}
}
