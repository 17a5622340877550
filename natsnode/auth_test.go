package natsnode_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/natsnode"
)

// TestNkeyAndInboxPrefixFromEnv: NATS_NKEY authenticates to a server that
// lists nkey users, and NATS_INBOX_PREFIX sets the reply prefix — the only
// one the user may subscribe to, so its requests work only with it. The
// last credential option given counts (a flag after the environment).
func TestNkeyAndInboxPrefixFromEnv(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedPath := filepath.Join(dir, "user.nk")
	writeFile(t, seedPath, string(seed))
	conf := filepath.Join(dir, "nkeys.conf")
	writeFile(t, conf, `jetstream: enabled
authorization {
  users = [
    { nkey: `+pub+`, permissions: { publish: ["$JS.API.>"], subscribe: ["_INBOX.me.>"] } }
    { user: admin, password: s3cret }
  ]
}
`)
	srv, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithDataDir(filepath.Join(dir, "store")), natsnode.WithListen(0),
		natsnode.WithUserPassword("admin", "s3cret"))
	if err != nil {
		t.Fatalf("embedded server with a user and password: %v", err)
	}
	defer srv.Close(ctx)

	env := map[string]string{natsnode.EnvURL: srv.URL(), natsnode.EnvNkey: seedPath, natsnode.EnvInboxPrefix: "_INBOX.me"}
	n, err := natsnode.Start(ctx, natsnode.FromEnv(func(k string) string { return env[k] })...)
	if err != nil {
		t.Fatalf("NATS_NKEY with NATS_INBOX_PREFIX: %v", err)
	}
	if in := n.Conn().NewInbox(); !strings.HasPrefix(in, "_INBOX.me.") {
		t.Errorf("inbox %s, want _INBOX.me.…", in)
	}
	n.Close(ctx)

	// A user/password flag given after NATS_NKEY replaces it.
	opts := append(natsnode.FromEnv(func(k string) string { return env[k] }), natsnode.WithUserPassword("admin", "wrong"), natsnode.WithNATSOptions(nats.MaxReconnects(0)))
	if n, err := natsnode.Start(ctx, opts...); err == nil {
		n.Close(ctx)
		t.Fatal("the wrong password given last connected: the nkey counted instead")
	}
}
