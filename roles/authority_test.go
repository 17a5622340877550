package roles_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/worker"
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
	for _, r := range roles.All {
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
	if _, err := roles.Permissions(roles.Worker, worker.Queue{Agent: "a", Version: "1"}); err == nil {
		t.Error("a worker grant without a tool")
	}
}
