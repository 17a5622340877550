package roles_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
)

// TestCredsNameTheirRole: each role's creds file carries its grant (name,
// tag, permissions) and the inbox prefix natsnode derives from it is the
// grant's; seeds and creds are private to their owner; opening the
// directory again keeps the same keys (issued credentials stay valid).
func TestCredsNameTheirRole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	a, err := roles.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.All() {
		path, err := a.Write(r, payQueue)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := roles.Permissions(r, payQueue)
		if got, err := natsnode.CredsInboxPrefix(path); err != nil || got != g.InboxPrefix {
			t.Errorf("%s: inbox prefix %q %v, want %q", r, got, err, g.InboxPrefix)
		}
		b, _ := os.ReadFile(path)
		tok, _ := jwt.ParseDecoratedJWT(b)
		uc, err := jwt.DecodeUserClaims(tok)
		if err != nil {
			t.Fatal(err)
		}
		if uc.Name != g.Name || !uc.Tags.Contains("weft-role:"+string(r)) || uc.IssuerAccount != "" && uc.IssuerAccount != a.Account() || uc.Issuer != a.Account() {
			t.Errorf("%s: claims name %q tags %v issuer %s", r, uc.Name, uc.Tags, uc.Issuer)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", path, fi.Mode())
		}
	}
	for _, f := range []string{roles.OperatorSeed, roles.SystemSeed, roles.AccountSeed} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	again, err := roles.Open(dir)
	if err != nil || again.Account() != a.Account() {
		t.Fatalf("reopened: account %s, was %s (%v)", again.Account(), a.Account(), err)
	}
	if _, err := roles.Permissions(roles.Worker, api.Queue{Agent: "a", Version: "1"}); err == nil {
		t.Error("a worker grant without a tool")
	}
}

// TestRevokeAndRotate: rotation is issuing new credentials and revoking
// the old: after Revoke and a configuration reload the server refuses the
// revoked creds file — an established connection is closed — while the
// role's new credentials, issued before or after, still connect. The
// revocation is made by the authority opened again (as weft roles revoke
// does) in a later second than the server's start: auth.conf keeps the
// operator's JWT, which a running server refuses to see change on a
// reload (it failed before whenever the second had changed: Open and
// Revoke signed the operator again).
func TestRevokeAndRotate(t *testing.T) {
	conf, a := shipped(t)
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.Port, opts.StoreDir = true, server.RANDOM_PORT, filepath.Join(t.TempDir(), "store")
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()

	old, _ := a.Write(roles.Operator, api.Queue{})
	oldCopy := filepath.Join(t.TempDir(), "old.creds")
	b, _ := os.ReadFile(old)
	os.WriteFile(oldCopy, b, 0o600)
	connect := func(creds string) (*nats.Conn, error) {
		return nats.Connect(srv.ClientURL(), nats.UserCredentials(creds), nats.MaxReconnects(0))
	}
	live, err := connect(oldCopy)
	if err != nil {
		t.Fatalf("the old credentials before revocation: %v", err)
	}
	closed := make(chan struct{})
	live.SetClosedHandler(func(*nats.Conn) { close(closed) })
	rotated, _ := a.Write(roles.Operator, api.Queue{}) // replaces the file
	// A later second than the server's start, by the clock the JWTs
	// carry (whole seconds).
	for s := time.Now().Unix(); time.Now().Unix() == s; {
		time.Sleep(10 * time.Millisecond)
	}
	a, err = roles.Open(a.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(oldCopy); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadOptions(mustReload(t, conf, opts)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the revoked user's connection stayed open after the reload")
	}
	if nc, err := connect(oldCopy); err == nil {
		nc.Close()
		t.Fatal("the revoked credentials still connect")
	}
	nc, err := connect(rotated)
	if err != nil {
		t.Fatalf("the rotated credentials: %v", err)
	}
	nc.Close()
}

// mustReload parses conf again with the running server's overrides.
func mustReload(t *testing.T, conf string, running *server.Options) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	o.NoSigs, o.Port, o.StoreDir = true, running.Port, running.StoreDir
	return o
}
