package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"

	"github.com/weftrun/weft/console"
)

func consoleCommand() command {
	return command{
		name: "console", summary: "serve the operator console: inbox, runs, run pages (a web page on loopback)",
		examples: []string{
			"weft console                                   # http://127.0.0.1:8480 against $NATS_URL",
			"weft console --listen 127.0.0.1:9000 --approver desk",
			"NATS_CREDS=operator.creds weft console --nats nats://weft.example:4222",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			listen := fs.String("listen", console.DefaultAddr, "address to serve on (loopback by default: the console has no login of its own)")
			approver := fs.String("approver", "", "approver the approval forms offer when the catalog lists none")
			poll := fs.Duration("poll", 0, "how often an open page checks for changes (default 1s)")
			verbose := fs.Bool("v", false, "log what the console does")
			retry := addRetryFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				level := slog.LevelWarn
				if *verbose {
					level = slog.LevelInfo
				}
				opts := []console.Option{console.WithLogger(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))), console.WithTimeout(e.timeout), console.WithRetry(retry.retry())}
				if *approver != "" {
					opts = append(opts, console.WithApprover(*approver))
				}
				if *poll > 0 {
					opts = append(opts, console.WithPoll(*poll))
				}
				c, err := console.New(n.Conn(), opts...)
				if err != nil {
					return err
				}
				ln, addr, err := console.Listen(*listen)
				if err != nil {
					return usagef("%v", err)
				}
				if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
					fmt.Fprintf(e.stderr, "warning: the console listens on %s, beyond this machine, with no login of its own: anyone who reaches it can approve and reconcile\n", ln.Addr())
				}
				fmt.Fprintf(e.stdout, "Console: %s (Weft at %s); stop with Ctrl-C.\n", addr, redactURL(e.url))
				return c.Serve(ctx, ln)
			}
		},
	}
}

// redactURL drops the user information (a password or token) from a NATS
// URL before it is printed.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}
