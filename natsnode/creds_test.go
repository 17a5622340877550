package natsnode_test

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/natsnode"
)

// TestExternalWithCredsFile: NATS_CREDS through FromEnv authenticates to a
// server in operator (JWT) mode, as a hosted or secured cluster runs; the
// same server refuses a connection without credentials.
func TestExternalWithCredsFile(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	must(err)
	encodeAccount := func(kp nkeys.KeyPair, js bool) (string, string) {
		pub, err := kp.PublicKey()
		must(err)
		c := jwt.NewAccountClaims(pub)
		if js {
			c.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		s, err := c.Encode(okp)
		must(err)
		return pub, s
	}
	sysKP, err := nkeys.CreateAccount()
	must(err)
	sysPub, sysJWT := encodeAccount(sysKP, false)
	akp, err := nkeys.CreateAccount()
	must(err)
	apub, ajwt := encodeAccount(akp, true)
	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	must(err)
	credsPath := filepath.Join(dir, "user.creds")
	writeFile(t, credsPath, string(creds))

	conf := filepath.Join(dir, "operator.conf")
	writeFile(t, conf, "operator: "+ojwt+"\nsystem_account: "+sysPub+"\nresolver: MEMORY\nresolver_preload: {\n "+
		sysPub+": "+sysJWT+"\n "+apub+": "+ajwt+"\n}\n")
	// The embedded server needs credentials of its own in operator mode.
	emb, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithDataDir(filepath.Join(dir, "store")), natsnode.WithListen(0),
		natsnode.WithNATSOptions(nats.UserCredentials(credsPath)))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close(ctx)
	if n, err := natsnode.Start(ctx, natsnode.WithURL(emb.URL()), natsnode.WithNATSOptions(nats.MaxReconnects(0))); err == nil {
		n.Close(ctx)
		t.Fatal("connected without credentials")
	}
	ext, err := natsnode.Start(ctx, natsnode.FromEnv(func(k string) string {
		return map[string]string{natsnode.EnvURL: emb.URL(), natsnode.EnvCreds: credsPath}[k]
	})...)
	if err != nil {
		t.Fatalf("with NATS_CREDS: %v", err)
	}
	defer ext.Close(ctx)
	if _, err := ext.JetStream().AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream through the creds file: %v", err)
	}
}
