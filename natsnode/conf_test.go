package natsnode_test

import (
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
