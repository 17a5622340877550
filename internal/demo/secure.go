package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
)

// SignedApprover is the name of the demo's approver of signed proofs in
// secure mode: it trusts the key in approver.nk (roles directory).
const SignedApprover = "keys"

// ApproverKeyFile is the file of the secure demo's approver signing key
// (an nkey user seed) in the roles directory.
const ApproverKeyFile = "approver.nk"

// secured is weft dev --secure's setup: the authority whose roles the
// embedded server enforces, each role's credentials file, and the
// approver's signing key.
type secured struct {
	dir      string
	conf     string
	creds    map[string]string // role name (worker.<queue> for workers) -> path
	order    []string
	approver string // public key
	keyFile  string
}

// prepareSecure opens (or creates) the roles directory dir, writes the
// server configuration that includes its auth.conf, issues fresh
// credentials for every role — one worker's per external tool — and the
// approver's signing key (kept across restarts).
func prepareSecure(dir string, external []string) (*secured, error) {
	auth, err := roles.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("demo: secure: %w", err)
	}
	s := &secured{dir: dir, conf: filepath.Join(dir, "nats-dev.conf"), creds: map[string]string{}}
	// The embedded server: natsnode's settings (JetStream, max_payload,
	// the listener and store given as options) plus the roles.
	if err := os.WriteFile(s.conf, []byte("# weft dev --secure: the embedded server with Weft's roles (docs/security.md)\ninclude \"auth.conf\"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("demo: secure: %w", err)
	}
	add := func(name string, role roles.Role, q api.Queue) error {
		path, err := auth.Write(role, q)
		if err != nil {
			return fmt.Errorf("demo: secure: %w", err)
		}
		s.creds[name] = path
		s.order = append(s.order, name)
		return nil
	}
	for _, r := range []roles.Role{roles.Runner, roles.Projector, roles.Operator, roles.Reader, roles.Custodian} {
		if err := add(string(r), r, api.Queue{}); err != nil {
			return nil, err
		}
	}
	for _, t := range external {
		q := api.Queue{Agent: AgentName, Version: "1", Tool: t}
		if err := add(roles.Name(roles.Worker, q), roles.Worker, q); err != nil {
			return nil, err
		}
	}
	s.keyFile = filepath.Join(dir, ApproverKeyFile)
	if s.approver, err = approverKey(s.keyFile); err != nil {
		return nil, err
	}
	return s, nil
}

// approverKey returns the public key of the user seed in path, creating
// it first when there is none.
func approverKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		seed, _ := kp.Seed()
		if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
			return "", fmt.Errorf("demo: secure: %w", err)
		}
		return kp.PublicKey()
	}
	if err != nil {
		return "", fmt.Errorf("demo: secure: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return "", fmt.Errorf("demo: secure: %s: %w", path, err)
	}
	return kp.PublicKey()
}

// nodeOptions are the embedded server's and the runner connection's.
// Permission violations are logged (they mean a grant is missing).
func (s *secured) nodeOptions(logger *slog.Logger) []natsnode.Option {
	return []natsnode.Option{natsnode.WithConfigFile(s.conf), natsnode.WithCredsFile(s.creds[string(roles.Runner)]),
		natsnode.WithNATSOptions(nats.ErrorHandler(violations(logger, string(roles.Runner))))}
}

// connect connects to url as role (the projector, the console's operator).
func (s *secured) connect(ctx context.Context, url string, role roles.Role, name string, logger *slog.Logger) (*natsnode.Node, error) {
	n, err := natsnode.Start(ctx, natsnode.WithURL(url), natsnode.WithCredsFile(s.creds[string(role)]), natsnode.WithName(name),
		natsnode.WithNATSOptions(nats.ErrorHandler(violations(logger, string(role)))))
	if err != nil {
		return nil, fmt.Errorf("demo: nats as the %s: %w", role, err)
	}
	return n, nil
}

// violations logs a connection's asynchronous errors, permission
// violations included.
func violations(logger *slog.Logger, role string) nats.ErrHandler {
	return func(_ *nats.Conn, _ *nats.Subscription, err error) {
		logger.Warn("demo: nats refused the "+role, "err", err)
	}
}

func closeQuietly(n *natsnode.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.Close(ctx)
}

func weftOr(weft string) string {
	if weft == "" {
		return "weft"
	}
	return weft
}

// approvers are the secure demo agent's: signed proofs by the approver
// key only (no trusting approver: anyone may otherwise approve).
func (s *secured) approvers() []*approvers.Approver {
	return []*approvers.Approver{approvers.Signed(SignedApprover, s.people())}
}

// people are the secure demo's person keys: the approver key also signs
// reconciliations, resolutions and cancellations (docs/security.md, "Who
// did it").
func (s *secured) people() []approvers.Key {
	return []approvers.Key{{Public: s.approver, Reviewer: "demo approver"}}
}

// print says what secure mode is and how to act as each role.
func (s *secured) print(w io.Writer, weft, url string, runs Runs) {
	run := runs.Pay
	fmt.Fprintf(w, "Secure mode: every client needs its role's credentials, each allowed exactly its job\n(docs/security.md). In %s:\n\n", s.dir)
	for _, name := range s.order {
		fmt.Fprintf(w, "  %-44s %s\n", name, s.creds[name])
	}
	fmt.Fprintf(w, "  %-44s %s (key %s)\n\n", "approver signing key", s.keyFile, s.approver)
	fmt.Fprintf(w, `The agent's only approver is %[5]q: it accepts answers signed with that key
(a proof over exactly the run, action, revision, requirement, tool and
arguments), and records the proof, so weft audit verify re-checks it.

Try it (another terminal):

  export NATS_URL=%[2]s NATS_CREDS=%[3]s
  %[1]s start %[6]s "pay invoice INV-7" --run %[7]s
  NATS_CREDS=%[8]s %[1]s approve %[7]s 2/call_2_1 --approver %[5]s --signing-key %[4]s   # a reader: not allowed (permission_denied, exit 7)
  %[1]s approve %[7]s 2/call_2_1 --approver %[5]s --signing-key %[4]s
  %[1]s show %[7]s
  %[1]s audit verify %[7]s

`, weft, url, s.creds[string(roles.Operator)], s.keyFile, SignedApprover, AgentName, run, s.creds[string(roles.Reader)])
	fmt.Fprintf(w, "With the nats CLI: nats --server %s --creds %s --inbox-prefix %s req weft.api.query.approvals '{}'\n\n",
		url, s.creds[string(roles.Operator)], roles.InboxPrefix(string(roles.Operator)))
}
