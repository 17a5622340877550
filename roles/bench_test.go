package roles_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/roles"
)

// The measurements of docs/adr/0013 (go test -run X -bench . ./roles):
// connecting with each kind of credentials, appending to the log with and
// without the runner's permissions, and adding a worker queue — a config
// reload with static users versus issuing credentials.

// BenchmarkConnect measures a client's connect (TCP, TLS-less, the
// CONNECT handshake and its authentication) to an embedded server: no
// authentication, a user and password, an nkey user, and a role's JWT
// (decentralised: the server verifies the user JWT's signature by the
// account and the nonce's by the user).
func BenchmarkConnect(b *testing.B) {
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	seed, _ := ukp.Seed()
	dir := b.TempDir()
	seedFile := filepath.Join(dir, "u.nk")
	os.WriteFile(seedFile, seed, 0o600)
	auth, err := roles.Open(filepath.Join(dir, "secure"))
	if err != nil {
		b.Fatal(err)
	}
	creds, _ := auth.Write(roles.Runner, api.Queue{})
	authConf, _ := os.ReadFile(filepath.Join(dir, "secure", roles.AuthConf))
	for _, c := range []struct {
		name, conf string
		opt        nats.Option
	}{
		{"open", "", nil},
		{"password", "authorization { users = [ { user: u, password: p } ] }\n", nats.UserInfo("u", "p")},
		{"nkey", "authorization { users = [ { nkey: " + upub + " } ] }\n", mustNkey(b, seedFile)},
		{"jwt-runner", string(authConf), nats.UserCredentials(creds)},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := embedded(b, c.conf)
			b.ResetTimer()
			for range b.N {
				opts := []nats.Option{}
				if c.opt != nil {
					opts = append(opts, c.opt)
				}
				nc, err := nats.Connect(srv.ClientURL(), opts...)
				if err != nil {
					b.Fatal(err)
				}
				nc.Close()
			}
		})
	}
}

func mustNkey(b *testing.B, path string) nats.Option {
	o, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		b.Fatal(err)
	}
	return o
}

func embedded(b *testing.B, conf string) *server.Server {
	b.Helper()
	dir := b.TempDir()
	path := filepath.Join(dir, "s.conf")
	if err := os.WriteFile(path, []byte(conf+"\njetstream { store_dir: \""+filepath.Join(dir, "js")+"\" }\nlisten: 127.0.0.1:-1\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		b.Fatal(err)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("not ready")
	}
	b.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// BenchmarkAppend measures one decision appended to the log (a sync
// JetStream publish with the expected-sequence check) over loopback TCP,
// by a client without permissions and by the runner role (about 110
// allowed subjects: the server checks each publish against them; results
// are cached per subject).
func BenchmarkAppend(b *testing.B) {
	dir := b.TempDir()
	auth, err := roles.Open(filepath.Join(dir, "secure"))
	if err != nil {
		b.Fatal(err)
	}
	creds, _ := auth.Write(roles.Runner, api.Queue{})
	authConf, _ := os.ReadFile(filepath.Join(dir, "secure", roles.AuthConf))
	for _, c := range []struct {
		name, conf string
		opts       []natsnode.Option
	}{
		{"open", "", nil},
		{"jwt-runner", string(authConf), []natsnode.Option{natsnode.WithCredsFile(creds)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := embedded(b, c.conf)
			ctx := context.Background()
			n, err := natsnode.Start(ctx, append(c.opts, natsnode.WithURL(srv.ClientURL()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close(ctx)
			if err := provision.Ensure(ctx, n.JetStream(), nil); err != nil {
				b.Fatal(err)
			}
			log := eventlog.New(n.JetStream())
			at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
			b.ResetTimer()
			for i := range b.N {
				run := fmt.Sprintf("b-%d", i)
				if _, _, err := log.Append(ctx, run, eventlog.Head{}, at, events.RunStarted{Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "x", Runner: "r"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAddWorkerQueue measures what adding one worker queue costs.
// Static users: the server's configuration gains a user and is reloaded
// (with 10 or 100 worker users already in it). Decentralised JWT: new
// credentials are issued and nothing on the server changes.
func BenchmarkAddWorkerQueue(b *testing.B) {
	for _, users := range []int{10, 100} {
		b.Run(fmt.Sprintf("static-reload-%d", users), func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "s.conf")
			write := func(n int) {
				var sb strings.Builder
				sb.WriteString("jetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\nlisten: 127.0.0.1:-1\nauthorization { users = [\n")
				for i := range n {
					g, _ := roles.Permissions(roles.Worker, api.Queue{Agent: "a", Version: "1", Tool: fmt.Sprintf("t%d", i)})
					fmt.Fprintf(&sb, "{ user: w%d, password: p, permissions: { publish: [%s], subscribe: [%s] } }\n", i, quoteAll(g.Publish), quoteAll(g.Subscribe))
				}
				sb.WriteString("] }\n")
				os.WriteFile(path, []byte(sb.String()), 0o644)
			}
			write(users)
			opts, err := server.ProcessConfigFile(path)
			if err != nil {
				b.Fatal(err)
			}
			opts.NoSigs = true
			srv, _ := server.NewServer(opts)
			go srv.Start()
			srv.ReadyForConnections(10 * time.Second)
			defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				write(users + 1 + i%2)
				b.StartTimer()
				if err := srv.Reload(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("jwt-issue", func(b *testing.B) {
		auth, err := roles.Open(filepath.Join(b.TempDir(), "secure"))
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := auth.Issue(roles.Worker, api.Queue{Agent: "a", Version: "1", Tool: fmt.Sprintf("t%d", i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = `"` + s + `"`
	}
	return strings.Join(q, ", ")
}
