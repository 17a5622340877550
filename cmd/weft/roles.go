package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/runner"
)

func rolesCommand() command {
	return command{
		name: "roles", args: "init | issue <role> [<agent>@<version>/<tool>] | revoke <creds file> | key <file> | show <role> [<queue>]",
		summary: "keys and least-privilege credentials for a secured NATS server (docs/security.md)",
		examples: []string{
			"weft roles init --dir secure --worker payment-desk@1/send_payment   # then: nats-server -c nats-secure.conf",
			"weft roles issue worker payment-desk@2/send_payment --dir secure    # a new queue's worker: no server change",
			"weft roles issue operator --dir secure --expires 720h               # short-lived credentials (rotation)",
			"weft roles revoke old-operator.creds --dir secure && nats-server --signal reload",
			"weft roles key alice.nk                                             # an approver's signing key (approvers.Signed)",
			"weft roles show worker payment-desk@1/send_payment                  # the subjects a role may use",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			dir := fs.String("dir", "secure", "the directory of the keys, auth.conf and the .creds files")
			expires := fs.Duration("expires", 0, "issue: credentials valid this long (0: until revoked)")
			var workers listFlag
			fs.Var(&workers, "worker", "init: also a worker's credentials for this queue, <agent>@<version>/<tool> (repeatable)")
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) == 0 {
					return usagef("want init, issue, revoke, key or show (see weft roles --help)")
				}
				switch args[0] {
				case "init":
					if err := wantArgs(args[1:], 0, "init and flags only"); err != nil {
						return err
					}
					a, err := roles.Open(*dir)
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "authority in %s (account %s): %s for the server\n", a.Dir(), a.Account(), filepath.Join(a.Dir(), roles.AuthConf))
					for _, r := range []roles.Role{roles.Runner, roles.Projector, roles.Operator, roles.Reader, roles.Custodian} {
						if err := issue(e, a, r, api.Queue{}, *expires); err != nil {
							return err
						}
					}
					for _, w := range workers {
						q, err := parseQueue(w)
						if err != nil {
							return err
						}
						if err := issue(e, a, roles.Worker, q, *expires); err != nil {
							return err
						}
					}
					hk, created, err := runner.LoadOrCreateHeadKey(filepath.Join(a.Dir(), runner.HeadKeyFile))
					if err != nil {
						return err
					}
					hpub, _ := hk.PublicKey()
					verb := "kept"
					if created {
						verb = "new"
					}
					fmt.Fprintf(e.stdout, "runner head signing key %s (%s), public key %s: give it to the runners (--head-key or %s); auditors check exports with --trust %s (and the people's keys with --people, the runners' person keys file)\n",
						filepath.Join(a.Dir(), runner.HeadKeyFile), verb, hpub, runner.EnvHeadKey, hpub)
					fmt.Fprintf(e.stdout, "Keep %s, %s, %s and %s secret (the account seed issues credentials); start the server with nats-server -c nats-secure.conf.\n",
						roles.OperatorSeed, roles.SystemSeed, roles.AccountSeed, runner.HeadKeyFile)
					return nil
				case "issue":
					r, q, err := roleArgs(args[1:])
					if err != nil {
						return err
					}
					a, err := roles.Open(*dir)
					if err != nil {
						return err
					}
					return issue(e, a, r, q, *expires)
				case "show":
					r, q, err := roleArgs(args[1:])
					if err != nil {
						return err
					}
					g, err := roles.Permissions(r, q)
					if err != nil {
						return usagef("%v", err)
					}
					fmt.Fprintf(e.stdout, "%s (inbox prefix %s, answers requests: %v)\npublish:\n", g.Name, g.InboxPrefix, g.Responses)
					for _, s := range g.Publish {
						fmt.Fprintf(e.stdout, "  %s\n", s)
					}
					fmt.Fprintln(e.stdout, "subscribe:")
					for _, s := range g.Subscribe {
						fmt.Fprintf(e.stdout, "  %s\n", s)
					}
					return nil
				case "revoke":
					if err := wantArgs(args[1:], 1, "revoke <creds file>"); err != nil {
						return err
					}
					a, err := roles.Open(*dir)
					if err != nil {
						return err
					}
					pub, err := a.Revoke(args[1])
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "revoked user %s in %s: reload the server (nats-server --signal reload) to refuse it\n", pub, filepath.Join(a.Dir(), roles.AuthConf))
					return nil
				case "key":
					if err := wantArgs(args[1:], 1, "key <file>"); err != nil {
						return err
					}
					return newSigningKey(e, args[1])
				}
				return usagef("unknown roles command %q", args[0])
			}
		},
	}
}

func issue(e *env, a *roles.Authority, r roles.Role, q api.Queue, expires time.Duration) error {
	path, err := a.Write(r, q, roles.WithExpiry(expires))
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "  %-10s %s\n", roles.Name(r, q), path)
	return nil
}

// roleArgs parses "<role> [<agent>@<version>/<tool>]".
func roleArgs(args []string) (roles.Role, api.Queue, error) {
	if len(args) == 0 || len(args) > 2 {
		return "", api.Queue{}, usagef("want <role> [<agent>@<version>/<tool>]")
	}
	r, err := roles.Parse(args[0])
	if err != nil {
		return "", api.Queue{}, usagef("%v", err)
	}
	var q api.Queue
	if r == roles.Worker {
		if len(args) != 2 {
			return "", api.Queue{}, usagef("a worker serves one queue: worker <agent>@<version>/<tool>")
		}
		if q, err = parseQueue(args[1]); err != nil {
			return "", api.Queue{}, err
		}
	} else if len(args) == 2 {
		return "", api.Queue{}, usagef("only a worker names a queue")
	}
	return r, q, nil
}

// parseQueue parses <agent>@<version>/<tool> (api.Queue.String).
func parseQueue(s string) (api.Queue, error) {
	agent, rest, ok1 := strings.Cut(s, "@")
	version, tool, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || agent == "" || version == "" || tool == "" {
		return api.Queue{}, usagef("queue %q: want <agent>@<version>/<tool>, such as payment-desk@1/send_payment", s)
	}
	return api.Queue{Agent: agent, Version: version, Tool: tool}, nil
}

// newSigningKey writes a new user nkey seed to path (mode 0600, never
// over an existing file) and prints its public key, for approvers.Key.
func newSigningKey(e *env, path string) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	seed, _ := kp.Seed()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	pub, _ := kp.PublicKey()
	fmt.Fprintf(e.stdout, "signing key %s\npublic key %s   (approvers.Key{Public: %q, Reviewer: \"…\"})\n", path, pub, pub)
	return nil
}
