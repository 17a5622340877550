package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/mcptools"
)

// approveHint is the command an approval answer of weft mcp serve names.
var approveHint = regexp.MustCompile(`A person approves with: ([^\n]*)`)

// askApproval calls the payment-desk tool of the weft mcp serve at url
// keyed key, for a payment that waits for approval, and returns the
// approve command its answer names.
func askApproval(t *testing.T, url, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hint-test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "payment-desk", Arguments: map[string]any{"input": "pay invoice INV-7"},
		Meta: mcp.Meta{mcptools.MetaIdempotencyKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	m := approveHint.FindStringSubmatch(text.String())
	if m == nil {
		t.Fatalf("the answer names no approve command:\n%s", text.String())
	}
	return m[1]
}

// TestMCPServeApproveHint_AsServed (docs/mcp.md, "Serve"; docs/security.md):
// `weft mcp serve` run as a user runs it chooses the approve command its
// approval answers name. Connected with credentials to weft dev --secure,
// it is the signing form naming the deployment's approver of signed proofs
// (read from the agent's catalog, no --approver given), and that command,
// with the person's key file for KEYFILE, approves the run. Without
// credentials (weft dev) it is the demo's credential form; there, asked
// for the signing form, no approver of signed proofs is listed and the
// placeholder APPROVER says where its name is.
func TestMCPServeApproveHint_AsServed(t *testing.T) {
	t.Run("secure, credentials", func(t *testing.T) {
		t.Setenv("NATS_URL", "")
		t.Setenv("NATS_CREDS", "")
		t.Setenv("WEFT_MODEL", "")
		data := t.TempDir()
		_, url := startDevCLI(t, "dev", "--secure", "--listen", "0", "--data", data)
		roles := filepath.Join(data, "roles")
		t.Setenv("NATS_URL", url)
		t.Setenv("NATS_CREDS", filepath.Join(roles, "operator.creds"))
		hint := askApproval(t, serveMCPHTTP(t, "mcp", "serve", "--agent", "payment-desk"), "inv-7")
		run := strings.Fields(hint)[2]
		if want := "weft approve " + run + " 2/call_2_1 --revision 1 --approver keys --signing-key KEYFILE"; hint != want {
			t.Fatalf("the hint is %q, want %q", hint, want)
		}
		args := strings.Fields(strings.Replace(hint, "KEYFILE", filepath.Join(roles, "approver.nk"), 1))[1:]
		if code, o, errs := cli(t, args...); code != 0 {
			t.Fatalf("the hint's command, run: exit %d\n%s%s", code, o, errs)
		}
		waitShow(t, run, "status     finished: completed")
	})
	t.Run("demo, no credentials", func(t *testing.T) {
		t.Setenv("NATS_URL", "")
		t.Setenv("NATS_CREDS", "")
		t.Setenv("WEFT_MODEL", "")
		_, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
		t.Setenv("NATS_URL", url)
		hint := askApproval(t, serveMCPHTTP(t, "mcp", "serve", "--agent", "payment-desk"), "inv-7")
		run := strings.Fields(hint)[2]
		if want := "weft approve " + run + " 2/call_2_1 --revision 1 --approver NAME --credential CREDENTIAL"; hint != want {
			t.Fatalf("the hint is %q, want %q", hint, want)
		}
		hint = askApproval(t, serveMCPHTTP(t, "mcp", "serve", "--agent", "payment-desk", "--approve-with", "signing-key"), "inv-8")
		run = strings.Fields(hint)[2]
		if want := "weft approve " + run + " 2/call_2_1 --revision 1 --approver APPROVER --signing-key KEYFILE (APPROVER: the agent lists no approver of signed proofs in its catalog entry; the deployment's name for the approver that holds your key)"; hint != want {
			t.Fatalf("the signing hint is %q, want %q", hint, want)
		}
	})
}
