package natsnode_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/weftrun/weft/natsnode"
)

// wantSync fails t unless the server's varz and Node.Sync both say always
// (every == 0) or that interval.
func wantSync(t *testing.T, n *natsnode.Node, always bool, every time.Duration) {
	t.Helper()
	va, ve := natsnode.VarzSync(n)
	if va != always || (!always && ve != every) {
		t.Errorf("varz: sync always %v, interval %v; want always %v, interval %v", va, ve, always, every)
	}
	na, ne, known := n.Sync()
	if !known || na != always || (!always && ne != every) {
		t.Errorf("Node.Sync: always %v, interval %v, known %v; want always %v, interval %v", na, ne, known, always, every)
	}
}

// TestSemantics8_AnEmbeddedServerSyncsEveryWriteByDefault: a node started
// with no option at all runs a server that fsyncs every write before it
// acknowledges it (sync_interval: always), so that an acknowledged fence
// or claim survives a power loss (docs/semantics.md §8, docs/reliability.md).
func TestSemantics8_AnEmbeddedServerSyncsEveryWriteByDefault(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the default store directory, below it
	ctx := ctxT(t)
	n, err := natsnode.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	wantSync(t, n, true, 0)
}

// TestSemantics8_AConfigWithoutSyncIntervalSyncsEveryWrite: a configuration
// file that does not set sync_interval (weft dev --secure writes one) gets
// the durable default too; one that sets it is obeyed, and an option
// overrides the file.
func TestSemantics8_AConfigWithoutSyncIntervalSyncsEveryWrite(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	bare := filepath.Join(dir, "bare.conf")
	writeFile(t, bare, "server_name: bare\n")
	n, err := natsnode.Start(ctx, natsnode.WithConfigFile(bare), natsnode.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	wantSync(t, n, true, 0)
	n.Close(ctx)

	every := filepath.Join(dir, "every.conf")
	writeFile(t, every, "jetstream { sync_interval: 45s }\n")
	n, err = natsnode.Start(ctx, natsnode.WithConfigFile(every), natsnode.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	wantSync(t, n, false, 45*time.Second)
	n.Close(ctx)

	n, err = natsnode.Start(ctx, natsnode.WithConfigFile(every), natsnode.WithDataDir(t.TempDir()), natsnode.WithSyncInterval("always"))
	if err != nil {
		t.Fatal(err)
	}
	wantSync(t, n, true, 0)
	n.Close(ctx)
}

// TestSemantics8_TheNonDurableSyncIntervalIsAnExplicitChoice: the trade of
// durability for speed is available by WithSyncInterval, WithSyncAlways(false)
// and WEFT_SYNC_INTERVAL (FromEnv), and a value that is neither "always"
// nor a positive duration fails Start instead of silently choosing.
func TestSemantics8_TheNonDurableSyncIntervalIsAnExplicitChoice(t *testing.T) {
	ctx := ctxT(t)
	for _, c := range []struct {
		name   string
		opts   []natsnode.Option
		always bool
		every  time.Duration
	}{
		{"WithSyncInterval 2m", []natsnode.Option{natsnode.WithSyncInterval("2m")}, false, 2 * time.Minute},
		{"WithSyncAlways false", []natsnode.Option{natsnode.WithSyncAlways(false)}, false, 2 * time.Minute},
		{"WEFT_SYNC_INTERVAL=30s", natsnode.FromEnv(func(k string) string {
			if k == natsnode.EnvSyncInterval {
				return "30s"
			}
			return ""
		}), false, 30 * time.Second},
		{"WEFT_SYNC_INTERVAL=always", natsnode.FromEnv(func(k string) string {
			if k == natsnode.EnvSyncInterval {
				return "always"
			}
			return ""
		}), true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := natsnode.Start(ctx, append(c.opts, natsnode.WithDataDir(t.TempDir()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close(ctx)
			wantSync(t, n, c.always, c.every)
		})
	}
	for _, bad := range []string{"sometimes", "0s", "-1m", ""} {
		if _, err := natsnode.Start(ctx, natsnode.WithSyncInterval(bad), natsnode.WithDataDir(t.TempDir())); err == nil {
			t.Errorf("WithSyncInterval(%q): Start succeeded, want an error", bad)
		}
	}
}
