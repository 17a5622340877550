package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/mcpops"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/natsnode"
)

// mcpCommand is `weft mcp serve`: the agents the runners serve, as MCP
// tools over stdio or streamable HTTP; and `weft mcp operator`: the
// inbox, the runs and their timelines as MCP tools, answering only with
// --answers (docs/mcp.md).
func mcpCommand() command {
	return command{
		name: "mcp", args: "serve|operator", summary: "serve agents as MCP tools, or (operator) the inbox, runs and timelines for an assistant (stdio, or streamable HTTP with --http)",
		examples: []string{
			"weft mcp serve --agent payment-desk                       # stdio: an MCP client starts this command",
			"weft mcp serve --agent payment-desk --http 127.0.0.1:8765 # streamable HTTP on http://127.0.0.1:8765/mcp",
			"weft mcp serve --agent payment-desk@1=pay --service desk --principal alice --wait 30s",
			"weft mcp operator                                         # read-only: inbox, runs, run, timeline",
			"weft mcp operator --answers --http 127.0.0.1:8766 --tokens tokens.txt  # and approve, reject, reconcile, resolve, cancel",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var agents listFlag
			fs.Var(&agents, "agent", "an agent to serve as a tool: NAME, NAME@VERSION, or either =TOOL to name the tool (repeatable)")
			var cfg mcpserve.Config
			fs.StringVar(&cfg.Service, "service", "weft", "the service name in the run ids of keyed calls")
			fs.StringVar(&cfg.DefaultPrincipal, "principal", "local", "who calls (the principal in the run ids of keyed calls)")
			fs.DurationVar(&cfg.Wait, "wait", 20*time.Second, "how long a call waits for its run before answering still working")
			fs.StringVar(&cfg.StatusTool, "status-tool", mcpserve.DefaultStatusTool, `the name of the tool that answers for a run id ("-": none)`)
			addr := fs.String("http", "", "serve streamable HTTP on host:port (path /mcp) instead of stdio; keep it on loopback, behind an authenticating proxy, or give --tokens")
			tokens := fs.String("tokens", "", "with --http: a file of bearer tokens, one `PRINCIPAL TOKEN` per line (# comments); a request without one of them is refused (401), and each principal has its own key space")
			approveWith := fs.String("approve-with", "", "the approve command the answers name: signing-key (approvers of signed proofs, the secure mode) or credential (the demo's trusting approver); default signing-key when the connection has credentials (--creds, --nkey, $NATS_CREDS, $NATS_NKEY), else credential")
			approver := fs.String("approver", "", "the approver the approve command the answers name (default: the signing form names the approver of signed proofs the agents' catalog lists, else a placeholder saying where its name is; the credential form a placeholder)")
			verbose := fs.Bool("v", false, "log requests to stderr")
			answers := fs.Bool("answers", false, "operator: add the answering tools (approve, reject, reconcile, resolve, cancel); the NATS credentials decide whether they are allowed")
			retry := addRetryFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 1 || (args[0] != "serve" && args[0] != "operator") {
					return usagef("want: weft mcp serve --agent NAME [flags], or weft mcp operator [flags]")
				}
				operator := args[0] == "operator"
				if operator && len(agents) > 0 {
					return usagef("--agent is for weft mcp serve; weft mcp operator serves the inbox and the runs of every agent")
				}
				if !operator && *answers {
					return usagef("--answers is for weft mcp operator")
				}
				if !operator && len(agents) == 0 {
					return usagef("--agent: name at least one agent to serve")
				}
				for _, a := range agents {
					ag, err := parseAgent(a)
					if err != nil {
						return err
					}
					cfg.Agents = append(cfg.Agents, ag)
				}
				signing := false
				switch *approveWith {
				case "signing-key":
					signing = true
				case "credential":
					cfg.ApproveCommand = credentialApproveCommand(*approver)
				case "":
					if hasCredentials(fs) {
						signing = true
					} else if *approver != "" {
						cfg.ApproveCommand = credentialApproveCommand(*approver)
					}
				default:
					return usagef("--approve-with %q: want signing-key or credential", *approveWith)
				}
				var verify auth.TokenVerifier
				if *tokens != "" {
					if *addr == "" {
						return usagef("--tokens needs --http: stdio has one caller, the process that started it")
					}
					var err error
					if verify, err = tokenVerifier(*tokens); err != nil {
						return err
					}
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				if signing {
					cfg.ApproveCommand = signingApproveCommand(*approver, catalog.NewClient(n.Conn()), cfg.Agents)
				}
				// --retry-within 0 sends once, as everywhere else
				// (Config.Retry 0 is the default bound).
				cfg.Retry, cfg.NoRetry = retry.within, retry.retry() <= 0
				var srv interface{ MCP() *mcp.Server }
				if operator {
					srv, err = mcpops.New(n.Conn(), mcpops.Config{Answers: *answers, Retry: cfg.Retry, NoRetry: cfg.NoRetry})
				} else {
					srv, err = mcpserve.New(n.Conn(), cfg)
				}
				if err != nil {
					return err
				}
				level := slog.LevelWarn
				if *verbose {
					level = slog.LevelInfo
				}
				logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
				if *addr == "" {
					// stdout carries the protocol: everything else goes to stderr.
					err := srv.MCP().Run(ctx, &mcp.StdioTransport{})
					if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
						return nil
					}
					return err
				}
				return serveHTTP(ctx, e, *addr, srv, logger, verify)
			}
		},
	}
}

// parseAgent reads NAME[@VERSION][=TOOL].
func parseAgent(s string) (mcpserve.Agent, error) {
	spec, tool, _ := strings.Cut(s, "=")
	name, version, _ := strings.Cut(spec, "@")
	if name == "" {
		return mcpserve.Agent{}, usagef("--agent %q: want NAME, NAME@VERSION, or either =TOOL", s)
	}
	return mcpserve.Agent{Name: name, Version: version, Tool: tool}, nil
}

// serveHTTP serves srv's streamable HTTP handler on addr until ctx ends.
func serveHTTP(ctx context.Context, e *env, addr string, srv interface{ MCP() *mcp.Server }, logger *slog.Logger, verify auth.TokenVerifier) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("--http %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, &mcp.StreamableHTTPOptions{Logger: logger})
	if verify != nil {
		// Tokens of a file carry no expiry of their own: they last until
		// the file changes and the server restarts.
		h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	}
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stderr, "weft mcp: serving streamable HTTP on http://%s/mcp\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-done
	return nil
}

// credentialApproveCommand names the trusting approver's form with
// approver (a placeholder when empty).
func credentialApproveCommand(approver string) func(run, action string, revision int) string {
	if approver == "" {
		approver = "NAME"
	}
	return func(run, action string, revision int) string {
		return fmt.Sprintf("weft approve %s %s --revision %d --approver %s --credential CREDENTIAL", run, action, revision, approver)
	}
}

// signingApproveCommand is the signing form of the approve command the
// answers name (mcpserve.SigningApproveCommand). Without --approver it
// names the approver of signed proofs the served agents' catalog entries
// list (catalog.Entry.Signed): the deployment's own name, so that the
// command is one a person can run with their key. When the agents list
// none, or several, the command keeps the placeholder APPROVER and says
// where its name is. The names are read as approverHint says.
func signingApproveCommand(approver string, cat *catalog.Client, agents []mcpserve.Agent) func(run, action string, revision int) string {
	if approver != "" {
		return mcpserve.SigningApproveCommand(approver)
	}
	return (&approverHint{cat: cat, agents: agents}).command
}

// The defaults of approverHint.
const (
	// hintReadTimeout bounds one read of the catalog.
	hintReadTimeout = 5 * time.Second
	// hintKeepFor is how long a read's names are used before the next
	// answer reads them again (a catalog that changed shows within it).
	hintKeepFor = 5 * time.Minute
	// hintRetryAfter is how long a failed read is remembered: the answers
	// meanwhile say it failed, at once, and read nothing.
	hintRetryAfter = 30 * time.Second
)

// approverHint reads the approvers of signed proofs an approval answer
// names from the catalog, when an answer first needs them, and keeps them
// for keepFor (hintKeepFor), then reads them again. One read at a time
// (single flight, bounded by timeout): answers that come during a read
// wait for that read, not for one of their own, and never hold a lock
// while the catalog is asked. A failed read is remembered for retryAfter
// (hintRetryAfter): the answers meanwhile name the failure without asking
// the catalog again — or, when an earlier read succeeded, still name what
// it read.
type approverHint struct {
	cat    *catalog.Client
	agents []mcpserve.Agent
	// timeout, keepFor and retryAfter: the defaults above when zero; now:
	// time.Now when nil.
	timeout, keepFor, retryAfter time.Duration
	now                          func() time.Time

	mu      sync.Mutex
	read    bool      // a read succeeded: names
	names   []string  // of the last successful read
	err     error     // of the last read, when it failed
	next    time.Time // when the next answer reads again
	reading chan struct{}
}

// command is the approve command an answer names for run's action at
// revision.
func (h *approverHint) command(run, action string, revision int) string {
	names, err := h.approvers()
	cmd := mcpserve.SigningApproveCommand("")(run, action, revision)
	switch {
	case err != nil:
		return cmd + " (APPROVER: the agent's approver of signed proofs; its catalog entry lists it, signed_approvers, which could not be read: " + err.Error() + ")"
	case len(names) == 1:
		return mcpserve.SigningApproveCommand(names[0])(run, action, revision)
	case len(names) == 0:
		return cmd + " (APPROVER: the agent lists no approver of signed proofs in its catalog entry; the deployment's name for the approver that holds your key)"
	default:
		return cmd + " (APPROVER: the one of " + strings.Join(names, ", ") + " that trusts your key)"
	}
}

// approvers returns the names to use now, reading them when due: the last
// successful read's while it is kept, or while a failed read since is
// remembered; else the failure.
func (h *approverHint) approvers() ([]string, error) {
	now := time.Now
	if h.now != nil {
		now = h.now
	}
	h.mu.Lock()
	for h.reading != nil {
		// Another answer is reading: wait for its read.
		wait := h.reading
		h.mu.Unlock()
		<-wait
		h.mu.Lock()
	}
	if (h.read || h.err != nil) && now().Before(h.next) {
		defer h.mu.Unlock()
		if h.read {
			return h.names, nil
		}
		return nil, h.err
	}
	done := make(chan struct{})
	h.reading = done
	h.mu.Unlock()

	timeout := cmp.Or(h.timeout, hintReadTimeout)
	names, err := signedApprovers(h.cat, h.agents, timeout)

	h.mu.Lock()
	defer h.mu.Unlock()
	h.reading = nil
	close(done)
	if err != nil {
		h.err, h.next = err, now().Add(cmp.Or(h.retryAfter, hintRetryAfter))
		if h.read {
			return h.names, nil
		}
		return nil, err
	}
	h.read, h.names, h.err, h.next = true, names, nil, now().Add(cmp.Or(h.keepFor, hintKeepFor))
	return names, nil
}

// signedApprovers lists the approvers of signed proofs the catalog
// entries of agents name, each once, in order, reading for at most
// timeout.
func signedApprovers(cat *catalog.Client, agents []mcpserve.Agent, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var names []string
	for _, a := range agents {
		e, err := cat.Agent(ctx, events.AgentRef{Name: a.Name, Version: a.Version})
		if err != nil {
			return nil, err
		}
		for _, sa := range e.Signed {
			if !slices.Contains(names, sa.Name) {
				names = append(names, sa.Name)
			}
		}
	}
	return names, nil
}

// hasCredentials reports whether the command connects with credentials
// (a creds file or an nkey, from a flag or the environment): a secure
// deployment, whose approvers take signed proofs.
func hasCredentials(fs *flag.FlagSet) bool {
	for _, name := range []string{"creds", "nkey"} {
		if f := fs.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return os.Getenv(natsnode.EnvCreds) != "" || os.Getenv(natsnode.EnvNkey) != ""
}

// tokenVerifier reads a tokens file (`PRINCIPAL TOKEN` per line, blank
// lines and # comments skipped) and returns the verifier that maps a
// bearer token to its principal (the TokenInfo's UserID, which mcpserve
// makes the principal of the run ids of keyed calls). A malformed file, a
// token given twice, is a bad command line; a principal may have several
// tokens (while one replaces another).
func tokenVerifier(path string) (auth.TokenVerifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type entry struct{ principal, token string }
	var entries []entry
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, usagef("--tokens %s line %d: want PRINCIPAL TOKEN", path, i+1)
		}
		if seen[f[1]] {
			return nil, usagef("--tokens %s line %d: a token given twice", path, i+1)
		}
		seen[f[1]] = true
		entries = append(entries, entry{f[0], f[1]})
	}
	if len(entries) == 0 {
		return nil, usagef("--tokens %s: no tokens", path)
	}
	return func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		for _, e := range entries {
			if subtle.ConstantTimeCompare([]byte(e.token), []byte(token)) == 1 {
				return &auth.TokenInfo{UserID: e.principal}, nil
			}
		}
		return nil, auth.ErrInvalidToken
	}, nil
}
