package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/mcpserve"
)

// mcpCommand is `weft mcp serve`: the agents the runners serve, as MCP
// tools over stdio or streamable HTTP (docs/mcp.md).
func mcpCommand() command {
	return command{
		name: "mcp", args: "serve", summary: "serve agents as MCP tools (stdio, or streamable HTTP with --http)",
		examples: []string{
			"weft mcp serve --agent payment-desk                       # stdio: an MCP client starts this command",
			"weft mcp serve --agent payment-desk --http 127.0.0.1:8765 # streamable HTTP on http://127.0.0.1:8765/mcp",
			"weft mcp serve --agent payment-desk@1=pay --service desk --principal alice --wait 30s",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var agents listFlag
			fs.Var(&agents, "agent", "an agent to serve as a tool: NAME, NAME@VERSION, or either =TOOL to name the tool (repeatable)")
			var cfg mcpserve.Config
			fs.StringVar(&cfg.Service, "service", "weft", "the service name in the run ids of keyed calls")
			fs.StringVar(&cfg.DefaultPrincipal, "principal", "local", "who calls (the principal in the run ids of keyed calls)")
			fs.DurationVar(&cfg.Wait, "wait", 20*time.Second, "how long a call waits for its run before answering still working")
			fs.StringVar(&cfg.StatusTool, "status-tool", mcpserve.DefaultStatusTool, `the name of the tool that answers for a run id ("-": none)`)
			addr := fs.String("http", "", "serve streamable HTTP on host:port (path /mcp) instead of stdio; keep it on loopback or behind an authenticating proxy")
			verbose := fs.Bool("v", false, "log requests to stderr")
			retry := addRetryFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 1 || args[0] != "serve" {
					return usagef("want: weft mcp serve --agent NAME [flags]")
				}
				if len(agents) == 0 {
					return usagef("--agent: name at least one agent to serve")
				}
				for _, a := range agents {
					ag, err := parseAgent(a)
					if err != nil {
						return err
					}
					cfg.Agents = append(cfg.Agents, ag)
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				// --retry-within 0 sends once, as everywhere else
				// (Config.Retry 0 is the default bound).
				cfg.Retry, cfg.NoRetry = retry.within, retry.retry() <= 0
				srv, err := mcpserve.New(n.Conn(), cfg)
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
				return serveHTTP(ctx, e, *addr, srv, logger)
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
func serveHTTP(ctx context.Context, e *env, addr string, srv *mcpserve.Server, logger *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("--http %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, &mcp.StreamableHTTPOptions{Logger: logger}))
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
