package natsnode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/natsnode"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEmbeddedInProcessKeepsDataAcrossRestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !n.Embedded() || n.URL() != "" || n.DataDir() != dir {
		t.Fatalf("embedded=%v url=%q dir=%q", n.Embedded(), n.URL(), n.DataDir())
	}
	if _, err := n.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.JetStream().Publish(ctx, "s.1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !n.Conn().IsClosed() {
		t.Fatal("connection still open after Close")
	}

	n, err = natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	m, err := n.JetStream().Publish(ctx, "s.2", []byte("again"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sequence != 2 {
		t.Fatalf("sequence after restart %d, want 2 (data lost)", m.Sequence)
	}
}

func TestEmbeddedListenerAndExternalURL(t *testing.T) {
	ctx := ctxT(t)
	emb, err := natsnode.Start(ctx, natsnode.WithDataDir(t.TempDir()), natsnode.WithListen(0))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close(ctx)
	if emb.URL() == "" {
		t.Fatal("no URL with a listener")
	}
	// The same code path, external: connect to the embedded server by URL.
	ext, err := natsnode.Start(ctx, natsnode.FromEnv(func(k string) string {
		if k == natsnode.EnvURL {
			return emb.URL()
		}
		return ""
	})...)
	if err != nil {
		t.Fatal(err)
	}
	if ext.Embedded() || ext.URL() != emb.URL() {
		t.Fatalf("external node: embedded=%v url=%q", ext.Embedded(), ext.URL())
	}
	sub, err := emb.Conn().SubscribeSync("ping")
	if err != nil {
		t.Fatal(err)
	}
	emb.Conn().Flush()
	if err := ext.Conn().Publish("ping", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("message across connections: %v", err)
	}
	if err := ext.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestExternalWithToken(t *testing.T) {
	ctx := ctxT(t)
	// A server requiring a token, started from a config file.
	conf := filepath.Join(t.TempDir(), "auth.conf")
	writeFile(t, conf, "authorization { token: \"s3cret\" }\n")
	emb, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithDataDir(t.TempDir()), natsnode.WithListen(0),
		natsnode.WithNATSOptions(nats.Token("s3cret")))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close(ctx)
	if _, err := natsnode.Start(ctx, natsnode.WithURL(emb.URL()), natsnode.WithNATSOptions(nats.MaxReconnects(0))); err == nil {
		t.Fatal("connected without the token")
	}
	ext, err := natsnode.Start(ctx, natsnode.WithURL(emb.URL()), natsnode.WithToken("s3cret"))
	if err != nil {
		t.Fatalf("with token: %v", err)
	}
	ext.Close(ctx)
}

func TestDefaultDataDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/tmp/xdg")
	if d, err := natsnode.DefaultDataDir(); err != nil || d != "/tmp/xdg/weft" {
		t.Fatalf("DefaultDataDir = %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, err := natsnode.DefaultDataDir(); err != nil || d != "/home/u/.local/state/weft" {
		t.Fatalf("DefaultDataDir = %q, %v", d, err)
	}
}

func TestDataDirInUse(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	a, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsnode.Start(ctx, natsnode.WithDataDir(dir)); !errors.Is(err, natsnode.ErrDataDirInUse) {
		t.Fatalf("second server on the same store: %v, want ErrDataDirInUse", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatalf("after Close the store is free: %v", err)
	}
	b.Close(ctx)
}

// TestExternalWithUserPasswordFromEnv: NATS_URL, NATS_USER and
// NATS_PASSWORD through FromEnv reach a server requiring them; a wrong
// password is refused.
func TestExternalWithUserPasswordFromEnv(t *testing.T) {
	ctx := ctxT(t)
	conf := filepath.Join(t.TempDir(), "users.conf")
	writeFile(t, conf, "authorization { users: [ {user: \"weft\", password: \"pw\"} ] }\n")
	emb, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithDataDir(t.TempDir()), natsnode.WithListen(0),
		natsnode.WithNATSOptions(nats.UserInfo("weft", "pw")))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close(ctx)
	env := func(password string) func(string) string {
		return func(k string) string {
			return map[string]string{natsnode.EnvURL: emb.URL(), natsnode.EnvUser: "weft", natsnode.EnvPassword: password}[k]
		}
	}
	if n, err := natsnode.Start(ctx, append(natsnode.FromEnv(env("wrong")), natsnode.WithNATSOptions(nats.MaxReconnects(0)))...); err == nil {
		n.Close(ctx)
		t.Fatal("connected with a wrong password")
	}
	ext, err := natsnode.Start(ctx, natsnode.FromEnv(env("pw"))...)
	if err != nil {
		t.Fatalf("with user and password from the environment: %v", err)
	}
	if ext.Embedded() {
		t.Fatal("FromEnv with NATS_URL started an embedded server")
	}
	ext.Close(ctx)
}

// TestFromEnvDataDir: WEFT_DATA sets the embedded store directory.
func TestFromEnvDataDir(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n, err := natsnode.Start(ctx, natsnode.FromEnv(func(k string) string {
		if k == natsnode.EnvData {
			return dir
		}
		return ""
	})...)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if !n.Embedded() || n.DataDir() != dir {
		t.Fatalf("embedded=%v dir=%q, want %q", n.Embedded(), n.DataDir(), dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("store not under WEFT_DATA: %v", err)
	}
}
