package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/inboxcheck"
	"github.com/weftrun/weft/natsnode"
)

// Exit codes (docs/cli.md).
const (
	exitOK          = 0 // success
	exitFailed      = 1 // the server refused the command (a protocol error code is printed)
	exitUsage       = 2 // bad command line
	exitUnavailable = 3 // NATS or the service did not answer
	exitAudit       = 4 // audit verify found a problem
	exitLocal       = 5 // a local problem: the store dir or port is in use, a file cannot be read or written
	exitNotKnown    = 6 // whether the command took effect is not known (outcome_unknown, or no answer to a command sent): read the run
	exitDenied      = 7 // the NATS server refused these credentials the subject the command needs (permission_denied): nothing was sent
	exitPartial     = 8 // part of the work was done and part not (a purge that removed some runs, an export that skipped runs): both are printed
)

// DefaultURL is the server the client commands use without --nats or
// NATS_URL.
const DefaultURL = "nats://127.0.0.1:4222"

// usageError is a bad command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// partialError is a command that did part of its work and not the rest
// (exit 8): what it did is printed before, Err is why it stopped or what
// it left out.
type partialError struct {
	done string // what was done, for the message
	err  error
}

func (e partialError) Error() string { return fmt.Sprintf("partial: %s; then: %v", e.done, e.err) }
func (e partialError) Unwrap() error { return e.err }

// auditError is a verification that found a problem.
type auditError struct{ msg string }

func (e auditError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue usageError
	var ae auditError
	var we *weft.Error
	var pe partialError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &pe):
		return exitPartial
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ae):
		return exitAudit
	case errors.As(err, &we):
		switch we.Code {
		case weft.CodeUnavailable:
			return exitUnavailable
		case weft.CodeOutcomeUnknown:
			return exitNotKnown
		case weft.CodePermissionDenied:
			return exitDenied
		}
		return exitFailed
	case errors.Is(err, natsnode.ErrDataDirInUse), errors.Is(err, demo.ErrPortInUse),
		errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrExist):
		return exitLocal
	}
	return exitFailed
}

// command is one subcommand.
type command struct {
	name     string
	args     string // the positional arguments, for usage
	summary  string
	examples []string
	help     string // more text for --help, after the examples
	flags    func(fs *flag.FlagSet) func(ctx context.Context, env *env, args []string) error
}

// env is what every command gets: where to write, how to reach NATS.
type env struct {
	stdout, stderr io.Writer
	url            string
	urlGiven       bool // --nats or NATS_URL was given (bench then uses it)
	urlFlag        bool // --nats was given (dev then uses it; NATS_URL it does not)
	timeout        time.Duration
	creds          *natsnode.Flags // --creds, --nkey, --user, --password, --inbox-prefix
	// refused is the last permission the server refused a connection of
	// this command (nil: none): notePermission keeps it, refusedAs says it.
	mu      sync.Mutex
	refused *refusal
	// notesRefusals: the command's connections note the server's
	// refusals (notesRefusals of its name); else they are not kept.
	notesRefusals bool
	// ctx is the command's context and end ends it: with notesRefusals,
	// the first refusal of a JetStream call (endsCommand) ends the command
	// at once, its cause the permission_denied (api.Violations).
	ctx context.Context
	end context.CancelCauseFunc
	// tolerates names the subjects whose refusal the command survives
	// (show without the legal holds): they do not end it.
	tolerates func(subject string) bool
	// refusals is the last connection's (nil: none yet), for a call that
	// watches its own subjects.
	refusals *api.Violations
	// sends: this invocation sends a command (a command whose name does
	// not say so for every invocation: weft hold places or releases one,
	// hold list reads). Its connections' refusals do not end it
	// (sendsCommands): ended while it waits for the command's answer, it
	// would say nothing was sent.
	sends bool
}

// testRefusalsWait, when set, leaves a refused JetStream call waiting
// unanswered instead of ending the command (endsCommand). Only TestMain
// sets it (WEFT_TEST_REFUSED_CALLS_WAIT), in a test binary run as weft,
// to kill a command while a refused call waits; the shipped weft never
// does: a refusal ends the command at once.
var testRefusalsWait = false

// endsCommand says whether the server's refusal of subject ends the
// command at once: a publish of a JetStream call (the command API's
// requests answer their own refusals: api.Request) that the command does
// not tolerate, or a subscription (its calls' replies: a refused reply
// inbox is told at connect, natsnode.Start, and any later one here).
func (e *env) endsCommand(verb, subject string) bool {
	if verb == api.SubscribeViolation {
		return true
	}
	return verb == api.PublishViolation && api.JetStreamSubject(subject) && (e.tolerates == nil || !e.tolerates(subject))
}

// connect connects to the server the command line names.
func (e *env) connect(ctx context.Context) (*natsnode.Node, error) {
	opts := natsnode.FromEnv(os.Getenv)
	if e.creds != nil {
		opts = append(opts, e.creds.Options()...)
	}
	// A command line fails at once on an unreachable server (a runner
	// waits for its server instead: natsnode.WithConnectWait).
	opts = append(opts, natsnode.WithURL(e.url), natsnode.WithConnectWait(0))
	if e.notesRefusals {
		opts = append(opts, natsnode.WithNATSOptions(nats.ErrorHandler(e.notePermission)))
	}
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	n, err := natsnode.Start(cctx, opts...)
	var refused *inboxcheck.Refused
	switch {
	case errors.As(err, &refused):
		// Every reply to this connection would be refused: not allowed,
		// at once (exit 7).
		return nil, &weft.Error{Code: weft.CodePermissionDenied, Message: fmt.Sprintf("not allowed: connect to %s: %v", e.url, refused)}
	case err != nil:
		return nil, &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("connect to %s: %v", e.url, err)}
	}
	if e.notesRefusals {
		r := api.WatchViolations(n.Conn())
		if e.end != nil && !testRefusalsWait && !e.sends {
			r.End(e.endsCommand, e.end)
		}
		e.mu.Lock()
		e.refusals = r
		e.mu.Unlock()
	}
	return n, nil
}

func closeNode(n *natsnode.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Close(ctx)
}

func commands() []command {
	return []command{
		runsCommand(), showCommand(), eventsCommand(), inboxCommand(),
		startCommand(), approveCommand(), rejectCommand(), decideCommand(), reconcileCommand(), resolveCommand(), cancelCommand(), settleCommand(),
		pauseCommand(true), pauseCommand(false), restartCommand(),
		auditCommand(), retentionCommand(), holdCommand(), rebuildCommand(), repairCommand(), consoleCommand(), devCommand(), mcpCommand(),
		chaosCommand(), benchCommand(), scaleCommand(),
		rolesCommand(),
	}
}

func find(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// exitCodesHelp is the exit code table every help text ends with.
const exitCodesHelp = `Exit codes:
  0 success, 1 refused by the server (its error code is printed),
  2 bad command line, 3 NATS or the service unavailable, 4 audit found a problem,
  5 a local problem (store dir or port in use, a file not readable or writable),
  6 whether the command took effect is not known (outcome_unknown, or no answer
  to a command sent): read the run, 7 not allowed: the server refused these
  credentials the subject (permission_denied), nothing was sent, 8 partial:
  part of the work was done (printed) and part not (a purge that removed some
  runs and stopped, a range export that skipped runs removed while it read).
`

const globalHelp = `weft: the Weft command-line client.

Usage:
  weft [--nats URL] <command> [flags] [args]

Every command but dev talks to a NATS server: --nats, else $NATS_URL, else
nats://127.0.0.1:4222 (credentials from --creds / NATS_CREDS, --nkey /
NATS_NKEY, --user / NATS_USER with NATS_PASSWORD, or NATS_TOKEN; with the
roles of docs/security.md, an operator's or reader's creds file). runs, show, inbox need a projector (weft dev runs one).

Commands:
%s
Examples:
  weft dev                                  # the payment desk on an embedded server
  weft start payment-desk "pay invoice INV-7" --run pay-7
  weft runs --status suspended              # runs waiting for people
  weft show pay-7                           # status, actions, what it waits for
  weft events pay-7                         # readable timeline
  weft inbox approvals
  weft approve pay-7 2/call_2_1 --approver desk --credential alice
  weft reconcile pay-13 2/call_2_1 --output '{"id":"PAY-13","status":"sent"}'
  weft audit export pay-7 -o pay-7.jsonl && weft audit verify --file pay-7.jsonl

%s
Run 'weft <command> --help' for a command's flags and examples.
`

func printGlobalHelp(w io.Writer) {
	var b strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, globalHelp, b.String(), exitCodesHelp)
}

// run runs the command line args.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr, url: os.Getenv(natsnode.EnvURL), timeout: 10 * time.Second}
	// Global flags before the command.
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		switch {
		case a == "-h" || a == "--help" || a == "-help":
			printGlobalHelp(stdout)
			return flag.ErrHelp
		case a == "--nats" || a == "-nats":
			if len(args) < 2 {
				return usagef("--nats needs a URL")
			}
			e.url, args, e.urlFlag = args[1], args[2:], true
		case strings.HasPrefix(a, "--nats="):
			e.url, args, e.urlFlag = strings.TrimPrefix(a, "--nats="), args[1:], true
		default:
			return usagef("unknown flag %s before the command (see weft --help)", a)
		}
	}
	if len(args) == 0 {
		printGlobalHelp(stderr)
		return usagef("no command")
	}
	if args[0] == "help" {
		if len(args) > 1 {
			args = []string{args[1], "--help"}
		} else {
			printGlobalHelp(stdout)
			return nil
		}
	}
	c, ok := find(args[0])
	if !ok {
		var names []string
		for _, c := range commands() {
			names = append(names, c.name)
		}
		return usagef("unknown command %q%s (see weft --help)", args[0], didYouMean(args[0], names))
	}
	fs := flag.NewFlagSet("weft "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&e.url, "nats", e.url, "NATS server URL (default $NATS_URL, else "+DefaultURL+")")
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "how long to wait for NATS and each answer; an acting command waits this plus --retry-within for its answer, all its tries included")
	e.creds = natsnode.RegisterFlags(fs)
	body := c.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "weft %s %s\n  %s\n\nFlags:\n", c.name, c.args, c.summary)
		printFlags(fs)
		if len(c.examples) > 0 {
			fmt.Fprintf(fs.Output(), "\nExamples:\n")
			for _, ex := range c.examples {
				fmt.Fprintf(fs.Output(), "  %s\n", ex)
			}
		}
		if c.help != "" {
			fmt.Fprintf(fs.Output(), "\n%s", c.help)
		}
		fmt.Fprintf(fs.Output(), "\n%s", exitCodesHelp)
	}
	if err := fs.Parse(interleave(fs, args[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	e.notesRefusals = notesRefusals(c.name)
	e.urlGiven = e.url != ""
	e.urlFlag = e.urlFlag || flagSet(fs, "nats")
	if e.url == "" {
		e.url = DefaultURL
	}
	if e.notesRefusals && !sendsCommands(c.name) {
		var end context.CancelCauseFunc
		ctx, end = context.WithCancelCause(ctx)
		defer end(nil)
		e.ctx, e.end = ctx, end
	}
	return deniedHint(e.refusedAs(body(ctx, e, fs.Args())))
}

// interleave moves flags after positional arguments in front of them, so
// that `weft show pay-42 --json` works like `weft show --json pay-42`.
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		}
	}
	return append(flags, pos...)
}

// printFlags prints fs's flags as the examples and docs spell them:
// --name for names of several letters, -x for one letter (flag.PrintDefaults
// writes -name for every flag; both forms are accepted).
func printFlags(fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ := strings.Cut(strings.TrimRight(rest, "\n"), " ")
			name, _, _ = strings.Cut(name, "\t")
			if len(name) > 1 {
				line = "  --" + rest
			}
		}
		fmt.Fprint(out, line)
	}
}

func wantArgs(args []string, n int, what string) error {
	if len(args) != n {
		return usagef("want %s, got %d argument(s)", what, len(args))
	}
	return nil
}
