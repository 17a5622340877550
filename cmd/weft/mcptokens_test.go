package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/mcptools"
)

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPServeHTTP_TokensSeparatePrincipals (docs/mcp.md, keyed
// invocation: the run id is RunID(service, principal, key)): `weft mcp
// serve --http --tokens FILE` makes each token's principal part of the key
// space — alice's and bob's calls with the same idempotency key start two
// runs, each in its own principal's run id — and refuses a request without
// a token it knows (401). Before, every HTTP caller was "local" and the
// second caller got the first caller's run.
func TestMCPServeHTTP_TokensSeparatePrincipals(t *testing.T) {
	st := mcptest.StartStack(t, greeter(t))
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# who  token\nalice tok-alice-1\nbob   tok-bob-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := serveMCPHTTP(t, "--nats", st.Server.URL, "mcp", "serve", "--agent", "greeter=greet", "--service", "tok-test", "--tokens", file)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(token string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: http.DefaultTransport}
		if token != "" {
			hc.Transport = bearer{token}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "tok-test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	}
	for _, tc := range []struct{ token, principal string }{{"tok-alice-1", "alice"}, {"tok-bob-1", "bob"}} {
		cs, err := connect(tc.token)
		if err != nil {
			t.Fatalf("%s: connect: %v", tc.principal, err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"input": "web"},
			Meta: mcp.Meta{mcptools.MetaIdempotencyKey: "same-key"}})
		_ = cs.Close()
		if err != nil {
			t.Fatalf("%s: call: %v", tc.principal, err)
		}
		want := mcpserve.RunID("tok-test", tc.principal, "same-key")
		if got, _ := res.Meta[mcpserve.MetaRun].(string); got != want {
			t.Errorf("%s's call ran in run %q, want %q (its own principal's)", tc.principal, got, want)
		}
	}
	for _, token := range []string{"", "tok-mallory"} {
		if cs, err := connect(token); err == nil {
			_ = cs.Close()
			t.Errorf("a connection with token %q was accepted", token)
		} else if !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
			t.Errorf("a connection with token %q: %v, want 401 Unauthorized", token, err)
		}
	}
}

// TestMCPServeApproveHint_SignedInSecureMode: with credentials (a secure
// deployment, whose approvers take signed proofs) the approve command
// `weft mcp serve` names is the signing form, the one that works there;
// --approve-with credential names the trusting approver's form.
func TestMCPServeApproveHint_SignedInSecureMode(t *testing.T) {
	signed := mcpserve.SigningApproveCommand("keys")("pay-7", "2/call_2_1", 1)
	if want := "weft approve pay-7 2/call_2_1 --revision 1 --approver keys --signing-key KEYFILE"; signed != want {
		t.Fatalf("signing form %q, want %q", signed, want)
	}
	if code, _, errs := cli(t, "mcp", "serve", "--agent", "x", "--approve-with", "password"); code != exitUsage || !strings.Contains(errs, "--approve-with") {
		t.Fatalf("a bad --approve-with: exit %d %s", code, errs)
	}
	if code, _, errs := cli(t, "mcp", "serve", "--agent", "x", "--tokens", "f"); code != exitUsage || !strings.Contains(errs, "--tokens needs --http") {
		t.Fatalf("--tokens over stdio: exit %d %s", code, errs)
	}
}

// TestMCPOperator: `weft mcp operator --http` serves the read-only
// operator tools (package mcpops) and, with --answers, the answering ones;
// --agent belongs to serve.
func TestMCPOperator(t *testing.T) {
	st := mcptest.StartStack(t, greeter(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 4}, {[]string{"--answers"}, 9}} {
		url := serveMCPHTTP(t, append([]string{"--nats", st.Server.URL, "mcp", "operator"}, tc.args...)...)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.ListTools(ctx, nil)
		_ = cs.Close()
		if err != nil || len(res.Tools) != tc.want {
			t.Fatalf("weft mcp operator %v: %d tools (%v), want %d", tc.args, len(res.Tools), err, tc.want)
		}
	}
	if code, _, errs := cli(t, "mcp", "operator", "--agent", "x"); code != exitUsage || !strings.Contains(errs, "--agent is for weft mcp serve") {
		t.Fatalf("operator --agent: exit %d %s", code, errs)
	}
}
