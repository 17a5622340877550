package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/provider"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/telemetry/exporter"
)

// EnvListen is the variable weft dev's --listen defaults to.
const EnvListen = "WEFT_LISTEN"

// listFlag is a repeatable (or comma-separated) string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

func devCommand() command {
	return command{
		name: "dev", summary: "run the payment-desk demo: embedded NATS, runner, worker, projector",
		examples: []string{
			"weft dev",
			"weft dev --listen 4222 --data /tmp/weft-dev   # then, elsewhere: export NATS_URL=nats://127.0.0.1:4222",
			"weft dev --sync-interval 2m                    # faster, not durable: fsync every 2 min instead of before every ack",
			"weft dev --nats nats://127.0.0.1:4222          # against an external nats-server -js (NATS_URL alone does not: dev starts its own)",
			"weft dev --external-tool send_payment          # act as send_payment's worker yourself (docs/protocol/41-tasks.md)",
			"weft dev --secure                              # with roles: every client needs its creds file (printed; docs/security.md)",
			"WEFT_MODEL=openai:gpt-4.1 OPENAI_API_KEY=... weft dev        # a real model instead of the scripted one",
			"weft dev --model openai:llama3.1:8b --model-base-url http://localhost:11434/v1   # Ollama (docs/models.md)",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var o demo.Options
			listen := os.Getenv(EnvListen)
			if listen == "" {
				listen = "4222"
			}
			fs.StringVar(&o.Listen, "listen", listen, "loopback port (or host:port) of the embedded server; 0 picks a free one (default $"+EnvListen+", else 4222)")
			fs.StringVar(&o.DataDir, "data", "", "the embedded server's store directory (default $WEFT_DATA, else the user's state dir)")
			syncInterval := os.Getenv(natsnode.EnvSyncInterval)
			if syncInterval == "" {
				syncInterval = natsnode.SyncAlways
			}
			fs.StringVar(&o.SyncInterval, "sync-interval", syncInterval, "the embedded server's sync_interval: always (an fsync before every acknowledgement: durable) or an interval such as 2m (faster; a power loss can lose what was acknowledged since the last fsync) (default $"+natsnode.EnvSyncInterval+", else always)")
			fs.StringVar(&o.Console, "console", console.DefaultAddr, "address of the operator console (loopback; a free port when taken); empty for none")
			verbose := fs.Bool("v", false, "log what the runtime does")
			fs.BoolVar(&o.Secure, "secure", false, "start the embedded server with Weft's roles and print each role's credentials file (docs/security.md)")
			fs.BoolVar(&o.RequireIdentity, "require-identity", false, "refuse a person's command (approve, reject, reconcile, resolve, cancel) that does not say who made it and why: identity_required (with --secure: a proof signed by the approver key, --signing-key; docs/security.md)")
			fs.StringVar(&o.SecureDir, "roles", "", "with --secure: the directory of the keys and credentials (default: roles in the store directory)")
			var external listFlag
			fs.Var(&external, "external-tool", "leave this tool's tasks to workers outside the process, such as the nats CLI (repeatable)")
			cfg, cfgErr := provider.ConfigFromEnv(os.Getenv)
			cfg.RegisterFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				// Only --nats runs the demo against an external server: a
				// NATS_URL exported for the other commands (as the printed
				// steps do) does not turn a second weft dev into a client of
				// the first one; it says so.
				if e.urlFlag {
					if flagSet(fs, "listen") || flagSet(fs, "data") || flagSet(fs, "secure") {
						return usagef("--listen, --data and --secure set up the embedded server; --nats %s runs the demo against that server instead: give one or the other", e.url)
					}
					if flagSet(fs, "sync-interval") {
						return usagef("--sync-interval sets the embedded server's durability; --nats %s runs the demo against that server, whose own sync_interval decides: give one or the other", e.url)
					}
					o.SyncInterval = ""
					o.NATSURL = e.url
					n, err := e.connect(ctx) // fails at once (exit 3) on a server that does not answer
					if err != nil {
						return err
					}
					closeNode(n)
				} else if u := os.Getenv(natsnode.EnvURL); u != "" {
					fmt.Fprintf(e.stdout, "NATS_URL=%s is set: weft dev starts its own server all the same (--nats %s runs the demo against that one instead).\n", u, u)
				}
				if !e.urlFlag {
					embedding()
				}
				if o.DataDir == "" {
					o.DataDir = os.Getenv(natsnode.EnvData)
				}
				if o.SyncInterval != "" {
					if _, _, err := natsnode.ParseSyncInterval(o.SyncInterval); err != nil {
						return usagef("--sync-interval: %v", err)
					}
				}
				if err := checkExternal(external); err != nil {
					return err
				}
				o.ExternalTools = external
				if cfgErr != nil {
					return usagef("%v", cfgErr)
				}
				m, err := devModel(e.stdout, cfg, flagSet(fs, "model"))
				if err != nil {
					return err
				}
				o.Model = m
				o.Stdout = e.stdout
				o.Weft, o.Dir = weftCommand()
				level := slog.LevelWarn
				if *verbose {
					level = slog.LevelInfo
				}
				o.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
				// WEFT_OTEL=stdout|otlp exports the runtime's spans
				// (docs/observability.md); unset exports nothing.
				shutdown, err := exporter.Setup(os.Getenv)
				if err != nil {
					return usagef("%v", err)
				}
				defer func() {
					if err := shutdown(context.WithoutCancel(ctx)); err != nil {
						fmt.Fprintf(e.stderr, "weft dev: telemetry: %v\n", err)
					}
				}()
				err = demo.Run(ctx, o)
				if errors.Is(err, natsnode.ErrDataDirInUse) {
					// NATS_URL is the other commands' remedy: weft dev
					// starts its own server all the same.
					return fmt.Errorf("%w\nto run the demo against the server that holds it: weft dev --nats <its url>; or give weft dev another --data", err)
				}
				return err
			}
		},
	}
}

// devModel opens the model --model or WEFT_MODEL configures, or the demo's
// scripted model when neither is set, and says on w which it is and why.
func devModel(w io.Writer, cfg provider.Config, fromFlag bool) (model.Model, error) {
	if !cfg.Configured() {
		m := demo.ScriptedModel()
		fmt.Fprintf(w, "Model: %s, the demo's scripted model (%s or --model selects a real one: openai:<model> or anthropic:<model>).\n",
			provider.Describe(m), provider.EnvModel)
		return m, nil
	}
	source := provider.EnvModel + "=" + cfg.Spec
	if fromFlag {
		source = "--model " + cfg.Spec
	}
	m, err := cfg.Open()
	if err != nil {
		return nil, usagef("%s: %v", source, err)
	}
	fmt.Fprintf(w, "Model: %s, from %s.\n", provider.Describe(m), source)
	return m, nil
}

// weftCommand says how the steps weft dev prints call weft in another
// terminal, and in which directory: "weft" when the weft on the PATH is
// this very binary; "go run ./cmd/weft" in the checkout's root when this
// process was built by go run (goRunBuilt); else this binary's path,
// relative to the working directory when it lies below it.
func weftCommand() (cmd, dir string) {
	exe, err := os.Executable()
	if err != nil {
		return "weft", ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	wd, _ := os.Getwd()
	if p, err := exec.LookPath("weft"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil && sameFile(r, exe) {
			return "weft", ""
		}
	}
	if goRunBuilt(exe) {
		run := "go run "
		if tags := buildTags(); tags != "" {
			run += "-tags " + tags + " " // the same build, from Go's cache
		}
		if _, err := os.Stat(filepath.Join(wd, "cmd", "weft", "main.go")); err == nil {
			return run + "./cmd/weft", wd
		}
		return run + "github.com/weftrun/weft/cmd/weft", wd
	}
	if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
		return "./" + filepath.ToSlash(rel), wd
	}
	return exe, ""
}

// goRunBuilt reports whether the executable exe is one go run built: it
// lies in Go's build cache (go run keeps the binaries it links there), as
// the go command on the PATH locates that cache for this environment
// (GOCACHE, go env -w, else the user's cache directory: whatever its name),
// or in a temporary directory of the go command's own (go-build…, under
// GOTMPDIR or the system's temp dir), where go run links when it does not
// cache.
func goRunBuilt(exe string) bool {
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return true
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return false
	}
	// GOTOOLCHAIN=local: a go.mod here that asks for a newer Go must not
	// make go env download a toolchain (or fail) before dev prints
	// anything; where go run caches is the go on PATH's answer.
	cmd := exec.Command(gocmd, "env", "GOCACHE")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		return false
	}
	if r, err := filepath.EvalSymlinks(cache); err == nil {
		cache = r
	}
	rel, err := filepath.Rel(cache, exe)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// buildTags returns the -tags this binary was built with ("" for none).
func buildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if st.Key == "-tags" {
				return st.Value
			}
		}
	}
	return ""
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// checkExternal makes an --external-tool naming no demo tool a usage error
// (exit 2) rather than a failure of demo.Run.
func checkExternal(external []string) error {
	var names []string
	for _, t := range demo.Tools() {
		names = append(names, t.Name())
	}
	for _, x := range external {
		if !slices.Contains(names, x) {
			return usagef("--external-tool %s: the demo's tools are %s", x, strings.Join(names, ", "))
		}
	}
	return nil
}
