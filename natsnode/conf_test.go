package natsnode_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weftrun/weft/natsnode"
)

// TestNATSConf parses the repository's nats.conf with the server's own
// parser and boots an embedded node from it.
func TestNATSConf(t *testing.T) {
	opts, err := server.ProcessConfigFile("../nats.conf")
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if !opts.JetStream {
		t.Error("nats.conf: JetStream not enabled")
	}
	if opts.StoreDir == "" {
		t.Error("nats.conf: no store_dir")
	}
	if !opts.SyncAlways {
		t.Errorf("nats.conf: sync_interval is not always (SyncInterval %v)", opts.SyncInterval)
	}
	if opts.Host != "127.0.0.1" || opts.Port != 4222 {
		t.Errorf("nats.conf: listen %s:%d, want 127.0.0.1:4222", opts.Host, opts.Port)
	}
	if opts.MaxPayload != natsnode.MaxPayload {
		t.Errorf("nats.conf: max_payload %d", opts.MaxPayload)
	}

	// The same file boots the embedded server (store and port overridden).
	ctx := ctxT(t)
	n, err := natsnode.Start(ctx, natsnode.WithConfigFile("../nats.conf"), natsnode.WithDataDir(t.TempDir()), natsnode.WithListen(0))
	if err != nil {
		t.Fatalf("start from nats.conf: %v", err)
	}
	defer n.Close(ctx)
	if _, err := n.JetStream().AccountInfo(ctx); err != nil {
		t.Fatalf("jetstream from nats.conf: %v", err)
	}
}

// TestSemantics8_NATSSecureConfSyncsEveryWrite: the shipped configuration
// with roles keeps nats.conf's durability (sync_interval: always), so that a
// deployment that adds roles does not lose it.
func TestSemantics8_NATSSecureConfSyncsEveryWrite(t *testing.T) {
	dir := t.TempDir()
	conf, err := os.ReadFile("../nats-secure.conf")
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile("../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	// nats-secure.conf includes secure/auth.conf, which weft roles init
	// writes; an empty one stands for it here.
	writeFile(t, filepath.Join(dir, "nats-secure.conf"), string(conf))
	writeFile(t, filepath.Join(dir, "nats.conf"), string(base))
	if err := os.MkdirAll(filepath.Join(dir, "secure"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "secure", "auth.conf"), "")
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats-secure.conf"))
	if err != nil {
		t.Fatalf("nats-secure.conf: %v", err)
	}
	if !opts.SyncAlways {
		t.Errorf("nats-secure.conf: sync_interval is not always (SyncInterval %v)", opts.SyncInterval)
	}
}
