package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
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

// hintAgent builds an agent called name whose approvers of signed proofs
// are called signed (one key each).
func hintAgent(t *testing.T, name string, signed ...string) *agent.Agent {
	t.Helper()
	_, pub := hintKey(t)
	var aps []*approvers.Approver
	for _, s := range signed {
		aps = append(aps, approvers.Signed(s, []approvers.Key{{Public: pub, Reviewer: "ana"}}))
	}
	ag, err := agent.New(name, model.NewRules("s"), nil, policy.Func(func(context.Context, policy.Action) (policy.Decision, error) {
		return policy.Allow(), nil
	}), agent.WithApprovers(aps...)).Build()
	if err != nil {
		t.Fatal(err)
	}
	return ag
}

func hintKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// TestMCPServeApproveHint_SeveralApprovers (docs/mcp.md, "Serve"): when
// the served agents' catalog entries list several approvers of signed
// proofs, the approve command an answer names keeps the placeholder
// APPROVER and names each of them once, in order — read from a real
// catalog.
func TestMCPServeApproveHint_SeveralApprovers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	svc, err := catalog.Serve(srv.Conn, []*agent.Agent{hintAgent(t, "desk-a", "keys-a", "keys-b"), hintAgent(t, "desk-b", "keys-b", "keys-c")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	hint := signingApproveCommand("", catalog.NewClient(srv.Conn), []mcpserve.Agent{{Name: "desk-a"}, {Name: "desk-b"}})
	want := "weft approve r1 1/call_1_1 --revision 2 --approver APPROVER --signing-key KEYFILE (APPROVER: the one of keys-a, keys-b, keys-c that trusts your key)"
	if got := hint("r1", "1/call_1_1", 2); got != want {
		t.Fatalf("the hint is %q, want %q", got, want)
	}
}

// TestMCPServeApproveHint_ReadFailed (docs/mcp.md, "Serve"): a catalog
// that does not answer makes one read at a time — answers that come
// during it wait for that read, not for one each — and the failure is
// remembered for a while: the answers meanwhile say the approver could
// not be read, without asking the catalog again. Once the catalog
// answers, the next read after that while names its approver; a later
// read that fails keeps naming it; and the names read are read again once
// kept for their while.
func TestMCPServeApproveHint_ReadFailed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	// A catalog of desk that takes requests and never answers.
	asked := make(chan *nats.Msg, 64)
	hang, err := srv.Conn.ChanSubscribe(catalog.SubjectPrefix+"desk", asked)
	if err != nil {
		t.Fatal(err)
	}
	reads := func() int {
		t.Helper()
		if err := srv.Conn.Flush(); err != nil { // the requests sent on Conn are delivered before the flush answers
			t.Fatal(err)
		}
		return len(asked)
	}
	var clock atomic.Int64 // seconds after start
	start := time.Now()
	h := &approverHint{cat: catalog.NewClient(srv.Conn), agents: []mcpserve.Agent{{Name: "desk"}},
		timeout: 200 * time.Millisecond, keepFor: time.Hour, retryAfter: time.Minute,
		now: func() time.Time { return start.Add(time.Duration(clock.Load()) * time.Second) }}
	failed := "weft approve r1 a --revision 1 --approver APPROVER --signing-key KEYFILE (APPROVER: the agent's approver of signed proofs; its catalog entry lists it, signed_approvers, which could not be read: "

	// Several answers at once while the catalog hangs: one read.
	var wg sync.WaitGroup
	hints := make([]string, 4)
	for i := range hints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hints[i] = h.command("r1", "a", 1)
		}()
	}
	wg.Wait()
	for i, got := range hints {
		if !strings.HasPrefix(got, failed) {
			t.Fatalf("answer %d names %q, want the failure", i, got)
		}
	}
	if n := reads(); n != 1 {
		t.Fatalf("4 answers at once asked the catalog %d times, want once", n)
	}
	// Within the while the failure is remembered: no read.
	clock.Store(59)
	if got := h.command("r1", "a", 1); !strings.HasPrefix(got, failed) {
		t.Fatalf("an answer within the while names %q, want the failure", got)
	}
	if n := reads(); n != 1 {
		t.Fatalf("an answer within the while asked the catalog again (%d reads)", n)
	}

	// The catalog answers: the next answer after the while reads it.
	if err := hang.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	svc, err := catalog.Serve(srv.Conn, []*agent.Agent{hintAgent(t, "desk", "keys")})
	if err != nil {
		t.Fatal(err)
	}
	clock.Store(61)
	named := "weft approve r1 a --revision 1 --approver keys --signing-key KEYFILE"
	if got := h.command("r1", "a", 1); got != named {
		t.Fatalf("after the while the answer names %q, want %q", got, named)
	}

	// It hangs again: once the names have been kept for their while they
	// are read again; the failed read keeps the names read before.
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if hang, err = srv.Conn.ChanSubscribe(catalog.SubjectPrefix+"desk", asked); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hang.Unsubscribe() }()
	clock.Store(61 + 3599)
	if got := h.command("r1", "a", 1); got != named || reads() != 1 {
		t.Fatalf("within the names' while: %q after %d reads, want %q and no read", got, reads(), named)
	}
	clock.Store(61 + 3600)
	if got := h.command("r1", "a", 1); got != named || reads() != 2 {
		t.Fatalf("after the names' while, the catalog hanging: %q after %d reads, want %q after a second read", got, reads(), named)
	}
	clock.Store(61 + 3600 + 59)
	if got := h.command("r1", "a", 1); got != named || reads() != 2 {
		t.Fatalf("within the failure's while: %q after %d reads, want %q and no read", got, reads(), named)
	}
}
