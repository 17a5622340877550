package roles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
)

// The files of an Authority's directory.
const (
	// AuthConf is the server configuration fragment: the operator JWT, the
	// system account and a memory resolver preloaded with the accounts'
	// JWTs. nats-secure.conf includes it; it holds no secret.
	AuthConf = "auth.conf"
	// OperatorSeed is the operator's secret key (it signs the accounts).
	// Keep the seeds off the servers and the clients.
	OperatorSeed = "operator.nk"
	// SystemSeed is the system account's secret key.
	SystemSeed = "system.nk"
	// AccountSeed is the WEFT account's secret key: it signs every role's
	// user JWT; only whoever issues credentials needs it.
	AccountSeed = "account.nk"
	// OperatorJWT is the operator's JWT, signed once and kept: a running
	// server refuses a configuration reload that changes its operator,
	// and a JWT signed again differs (its issue time), so auth.conf
	// always carries this one.
	OperatorJWT = "operator.jwt"
	// SystemJWT is the system account's JWT, kept as OperatorJWT.
	SystemJWT = "system.jwt"
)

// AccountName is the name of the account every role belongs to.
const AccountName = "WEFT"

// Authority is the key hierarchy of a Weft deployment: an operator, a
// system account and the WEFT account, whose key issues each role's
// credentials. Its keys live in a directory (see Open).
type Authority struct {
	dir                       string
	operator, system, account nkeys.KeyPair
}

// Open returns the authority whose keys are in dir, creating the directory
// and new keys when it has none, and writes dir/auth.conf when it has
// none (Revoke rewrites it). Seeds are written with mode 0600 and the
// directory with 0700.
func Open(dir string) (*Authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	a := &Authority{dir: dir}
	var err error
	if a.operator, err = loadOrCreate(filepath.Join(dir, OperatorSeed), nkeys.CreateOperator, nkeys.PrefixByteOperator); err != nil {
		return nil, err
	}
	if a.system, err = loadOrCreate(filepath.Join(dir, SystemSeed), nkeys.CreateAccount, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if a.account, err = loadOrCreate(filepath.Join(dir, AccountSeed), nkeys.CreateAccount, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, AuthConf)); err == nil {
		return a, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("roles: %w", err)
	}
	if err := a.writeAuthConf(); err != nil {
		return nil, err
	}
	return a, nil
}

// writeAuthConf writes ServerConfig to dir/auth.conf.
func (a *Authority) writeAuthConf() error {
	conf, err := a.ServerConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.dir, AuthConf), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("roles: %w", err)
	}
	return nil
}

// keptJWT returns the JWT in the file name of the authority's directory,
// signing it with encode and writing it there first when there is none; a
// kept JWT must be for subject (a key replaced under it is an error).
func (a *Authority) keptJWT(name, subject string, encode func() (string, error)) (string, error) {
	path := filepath.Join(a.dir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		c, err := jwt.Decode(tok)
		if err != nil {
			return "", fmt.Errorf("roles: %s: %w", path, err)
		}
		if c.Claims().Subject != subject {
			return "", fmt.Errorf("roles: %s is for key %s, not %s: remove it to sign it again", path, c.Claims().Subject, subject)
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("roles: %w", err)
	}
	tok, err := encode()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("roles: %w", err)
	}
	return tok, nil
}

func loadOrCreate(path string, create func() (nkeys.KeyPair, error), prefix nkeys.PrefixByte) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("roles: %s: %w", path, err)
		}
		if p := nkeys.Prefix(mustPublic(kp)); p != prefix {
			return nil, fmt.Errorf("roles: %s: not a %s key", path, prefix)
		}
		return kp, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("roles: %w", err)
	}
	kp, err := create()
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	return kp, nil
}

// mustPublic returns kp's public key.
func mustPublic(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// Dir is the authority's directory.
func (a *Authority) Dir() string { return a.dir }

// Account is the WEFT account's public key.
func (a *Authority) Account() string { return mustPublic(a.account) }

// ServerConfig returns the server configuration fragment that trusts the
// authority (the content of auth.conf): the operator's JWT, the system
// account, and a memory resolver preloaded with the system and WEFT
// accounts' JWTs (WEFT with JetStream).
func (a *Authority) ServerConfig() (string, error) {
	opub, spub, apub := mustPublic(a.operator), mustPublic(a.system), mustPublic(a.account)
	ojwt, err := a.keptJWT(OperatorJWT, opub, func() (string, error) {
		oc := jwt.NewOperatorClaims(opub)
		oc.Name = "weft"
		oc.SystemAccount = spub
		t, err := oc.Encode(a.operator)
		if err != nil {
			return "", fmt.Errorf("roles: operator: %w", err)
		}
		return t, nil
	})
	if err != nil {
		return "", err
	}
	sjwt, err := a.keptJWT(SystemJWT, spub, func() (string, error) {
		sc := jwt.NewAccountClaims(spub)
		sc.Name = "SYS"
		t, err := sc.Encode(a.operator)
		if err != nil {
			return "", fmt.Errorf("roles: system account: %w", err)
		}
		return t, nil
	})
	if err != nil {
		return "", err
	}
	ac := jwt.NewAccountClaims(apub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1}
	revoked, err := a.revocations()
	if err != nil {
		return "", err
	}
	for _, r := range revoked {
		ac.RevokeAt(r.Key, time.Unix(r.At, 0))
	}
	ajwt, err := ac.Encode(a.operator)
	if err != nil {
		return "", fmt.Errorf("roles: account: %w", err)
	}
	return fmt.Sprintf(`# Generated by weft (package roles, docs/security.md): the operator that
# signs Weft's accounts, and the accounts' JWTs. Public keys and signed
# claims only; the seeds (*.nk) stay next to it, not on the server.
operator: %s
system_account: %s
# A role's user JWT (up to about 6 KB: its permissions) travels in the
# client's CONNECT line; the NATS default limit is 4 KB.
max_control_line: 16KB
resolver: MEMORY
resolver_preload: {
  # SYS
  %s: %s
  # %s: every Weft role's user belongs to it
  %s: %s
}
`, ojwt, spub, spub, sjwt, AccountName, apub, ajwt), nil
}

// IssueOption configures Issue.
type IssueOption func(*jwt.UserClaims)

// WithExpiry makes the credentials expire d from now (the server refuses
// them afterwards): rotation by short-lived credentials.
func WithExpiry(d time.Duration) IssueOption {
	return func(uc *jwt.UserClaims) {
		if d > 0 {
			uc.Expires = time.Now().Add(d).Unix()
		}
	}
}

// Issue returns new credentials (a .creds file's content: the user JWT and
// its seed) for role, with a fresh user key. q names the queue of a Worker.
func (a *Authority) Issue(role Role, q api.Queue, opts ...IssueOption) ([]byte, error) {
	g, err := Permissions(role, q)
	if err != nil {
		return nil, err
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	uc := jwt.NewUserClaims(mustPublic(ukp))
	uc.Name = g.Name
	uc.Tags.Add("weft-role:" + string(role))
	uc.Permissions.Pub.Allow.Add(g.Publish...)
	uc.Permissions.Sub.Allow.Add(g.Subscribe...)
	if g.Responses {
		uc.Permissions.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	for _, o := range opts {
		o(uc)
	}
	ujwt, err := uc.Encode(a.account)
	if err != nil {
		return nil, fmt.Errorf("roles: %s: %w", g.Name, err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	return jwt.FormatUserConfig(ujwt, seed)
}

// CredsFile is the file name Write uses for role's credentials:
// <name>.creds, the worker's queue written agent@version-token@tool.
func CredsFile(role Role, q api.Queue) string {
	if role == Worker {
		return "worker-" + strings.TrimPrefix(q.Consumer(), api.ConsumerPrefix) + ".creds"
	}
	return string(role) + ".creds"
}

// Write issues credentials for role into the authority's directory (mode
// 0600, replacing the file) and returns its path. Credentials issued
// before stay valid until they expire or are revoked.
func (a *Authority) Write(role Role, q api.Queue, opts ...IssueOption) (string, error) {
	path := filepath.Join(a.dir, CredsFile(role, q))
	creds, err := a.Issue(role, q, opts...)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		return "", fmt.Errorf("roles: %w", err)
	}
	return path, nil
}

// Revocations is the file of revoked user keys in an Authority's
// directory, one "<user public key> <unix seconds>" per line: credentials
// of those keys issued before that time are refused once the server
// reloaded auth.conf.
const Revocations = "revocations"

type revocation struct {
	Key string
	At  int64
}

func (a *Authority) revocations() ([]revocation, error) {
	b, err := os.ReadFile(filepath.Join(a.dir, Revocations))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	var out []revocation
	for _, line := range strings.Split(string(b), "\n") {
		var r revocation
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if _, err := fmt.Sscanf(line, "%s %d", &r.Key, &r.At); err != nil || !nkeys.IsValidPublicUserKey(r.Key) {
			return nil, fmt.Errorf("roles: %s: bad line %q", Revocations, line)
		}
		out = append(out, r)
	}
	return out, nil
}

// Revoke revokes the credentials in the creds file at path (all issued
// for its user key until now) and rewrites auth.conf; the server refuses
// them once it reloads its configuration (nats-server --signal reload, or
// a restart). It returns the revoked user's public key.
func (a *Authority) Revoke(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("roles: %w", err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return "", fmt.Errorf("roles: %s: %w", path, err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return "", fmt.Errorf("roles: %s: %w", path, err)
	}
	if uc.Issuer != a.Account() {
		return "", fmt.Errorf("roles: %s was not issued by this authority's account", path)
	}
	f, err := os.OpenFile(filepath.Join(a.dir, Revocations), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("roles: %w", err)
	}
	_, werr := fmt.Fprintf(f, "%s %d\n", uc.Subject, time.Now().Unix()+1)
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("roles: %w", err)
	}
	if err := a.writeAuthConf(); err != nil {
		return "", err
	}
	return uc.Subject, nil
}
