// Package natsnode gives Weft its NATS connection through one code path,
// whether the server is embedded in the process or external.
//
// Embedded (the default): Start runs an in-process nats-server with
// JetStream. Its store lives in DataDir (default: DefaultDataDir, a "weft"
// folder under the user's state directory; callers wire --data / WEFT_DATA
// to WithDataDir); Start locks it, so a second embedded server on the same
// store fails with ErrDataDirInUse instead of corrupting it. Without a listener the client talks to the server over an
// in-process connection and nothing is reachable from outside; WithListen
// adds a loopback TCP listener (port 0 picks a free port) whose address URL
// reports, so the nats CLI can connect with `nats --server <url>`. The
// embedded server fsyncs every write before it acknowledges it
// (sync_interval: always) unless WithSyncInterval, WithSyncAlways(false),
// WEFT_SYNC_INTERVAL or the configuration file says otherwise: an
// acknowledged event survives a power loss (docs/reliability.md).
//
// External: WithURL (or NATS_URL through FromEnv) connects to an existing
// server or cluster, with credentials from a creds file, an nkey seed file,
// a user and password or a token (an embedded server started from a
// configuration with users or an operator takes the same credentials). A
// creds file issued by package roles also sets the connection's inbox
// prefix (the only replies its role may receive).
//
// Either way the caller gets a *Node with Conn, JetStream, URL and Close.
// Close drains the connection, then (embedded only) shuts the server down
// and waits for it to finish, so that a SIGTERM handler calling Close loses
// no acknowledged write.
//
// Shutdown on SIGTERM: Run wraps the whole sequence for a main (start the
// node, run the work until SIGTERM or an interrupt, then drain, shut the
// server down and wait, within a drain window); NotifyShutdown gives just
// the signal-bound context for mains that call Close themselves.
package natsnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/inboxcheck"
	"github.com/weftrun/weft/protocol"
)

// Environment variables read by FromEnv.
const (
	// EnvURL names the variable holding the external server URL(s), comma
	// separated; unset or empty means the embedded server.
	EnvURL = "NATS_URL"
	// EnvCreds names the variable holding the path of a .creds file.
	EnvCreds = "NATS_CREDS"
	// EnvUser names the variable holding the user name (with EnvPassword).
	EnvUser = "NATS_USER"
	// EnvPassword names the variable holding the password for EnvUser.
	EnvPassword = "NATS_PASSWORD"
	// EnvToken names the variable holding an authentication token.
	EnvToken = "NATS_TOKEN"
	// EnvNkey names the variable holding the path of an nkey seed file
	// (a user of a server that lists nkey users), as for the nats CLI.
	EnvNkey = "NATS_NKEY"
	// EnvInboxPrefix names the variable holding the connection's inbox
	// prefix (default _INBOX, or the one a creds file's permissions name).
	EnvInboxPrefix = "NATS_INBOX_PREFIX"
	// EnvCA names the variable holding the PEM file of the CA that signed
	// the server's TLS certificate (the nats CLI's name).
	EnvCA = "NATS_CA"
	// EnvCert names the variable holding the client's TLS certificate
	// (PEM), for a server that verifies clients.
	EnvCert = "NATS_CERT"
	// EnvKey names the variable holding the key of EnvCert's certificate.
	EnvKey = "NATS_KEY"
	// EnvData names the variable holding the embedded server's store directory.
	EnvData = "WEFT_DATA"
	// EnvSyncInterval names the variable holding the embedded server's
	// sync interval (WithSyncInterval): "always", the default, or a
	// duration such as "2m".
	EnvSyncInterval = "WEFT_SYNC_INTERVAL"
)

// SyncAlways is the sync interval (WithSyncInterval, EnvSyncInterval,
// nats-server's sync_interval) that makes the server fsync every write
// before it acknowledges it. It is the embedded server's default: an
// acknowledged event then survives a power loss of the machine, not only a
// crash of the process (docs/reliability.md).
const SyncAlways = "always"

// ParseSyncInterval parses a sync interval: SyncAlways (always is true) or
// a positive duration such as "2m", the time between the server's fsyncs
// (nats-server's own default; an acknowledged write is then only in the
// operating system's page cache until the next one).
func ParseSyncInterval(v string) (always bool, every time.Duration, err error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, SyncAlways) {
		return true, 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("natsnode: sync interval %q: want %q or a positive duration such as 2m", v, SyncAlways)
	}
	return false, d, nil
}

// MaxPayload is the max_payload (bytes) of the embedded server:
// protocol.MaxPayload, 8 MiB (docs/protocol/10-log.md).
const MaxPayload = protocol.MaxPayload

// ErrDataDirInUse is returned by Start when another process's embedded
// server already uses the store directory.
var ErrDataDirInUse = errors.New("natsnode: store dir in use by another embedded server")

// Option configures Start.
type Option func(*config)

type config struct {
	url         string
	creds       string
	user, pass  string
	token       string
	nkey        string
	inboxPrefix string
	tlsCA       string
	tlsCert     string
	tlsKey      string
	dataDir     string
	listen      bool
	port        int
	configFile  string
	name        string
	readyWait   time.Duration
	natsOpts    []nats.Option
	serverLog   bool
	drainWindow time.Duration
	connectWait time.Duration
	// syncSet says that syncAlways and syncEvery were given
	// (WithSyncAlways, WithSyncInterval); syncErr is a value
	// WithSyncInterval could not parse, returned by Start.
	syncSet    bool
	syncAlways bool
	syncEvery  time.Duration
	syncErr    error
}

// WithURL connects to the external server(s) at url instead of embedding
// one. An empty url keeps the embedded server.
func WithURL(url string) Option { return func(c *config) { c.url = url } }

// WithCredsFile authenticates with a .creds file. Of the credential
// options (WithCredsFile, WithNkeyFile, WithUserPassword, WithToken) the
// last one given counts.
func WithCredsFile(path string) Option {
	return func(c *config) { c.clearAuth(); c.creds = path }
}

// WithUserPassword authenticates to an external server with a user name and
// password.
func WithUserPassword(user, password string) Option {
	return func(c *config) { c.clearAuth(); c.user, c.pass = user, password }
}

// WithToken authenticates to an external server with a token.
func WithToken(token string) Option { return func(c *config) { c.clearAuth(); c.token = token } }

// WithNkeyFile authenticates with the nkey whose seed is in path (a server
// listing nkey users).
func WithNkeyFile(path string) Option { return func(c *config) { c.clearAuth(); c.nkey = path } }

// WithTLS makes the connection verify the server's TLS certificate with
// the CA in the PEM file ca (empty: the system's roots) and, when cert is
// not empty, present the client certificate cert with its key (a server
// configured with tls { verify: true }). Use a tls:// URL, or a server
// that requires TLS.
func WithTLS(ca, cert, key string) Option {
	return func(c *config) { c.tlsCA, c.tlsCert, c.tlsKey = ca, cert, key }
}

// clearAuth forgets the credentials set so far: of several credential
// options the last one given counts.
func (c *config) clearAuth() { c.creds, c.nkey, c.user, c.pass, c.token = "", "", "", "", "" }

// WithInboxPrefix sets the prefix of the connection's reply subjects
// (nats.CustomInboxPrefix), for a server that lets the user subscribe to
// replies under that prefix only. Without it, a creds file whose
// permissions allow subscribing to exactly one _INBOX.<name>.> (package
// roles' credentials) sets _INBOX.<name>.
func WithInboxPrefix(prefix string) Option { return func(c *config) { c.inboxPrefix = prefix } }

// WithDataDir sets the embedded server's store directory (JetStream data
// lives under it). An empty dir keeps the default.
func WithDataDir(dir string) Option { return func(c *config) { c.dataDir = dir } }

// WithListen makes the embedded server accept TCP clients on 127.0.0.1:port;
// port 0 picks a free port. URL reports the address.
func WithListen(port int) Option { return func(c *config) { c.listen, c.port = true, port } }

// WithConfigFile starts the embedded server from a nats-server
// configuration file (such as the repository's nats.conf). WithDataDir and
// WithListen, when given, override the file's store_dir and port.
func WithConfigFile(path string) Option { return func(c *config) { c.configFile = path } }

// WithName sets the client connection name shown by the server.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithNATSOptions appends raw nats.go connection options.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *config) { c.natsOpts = append(c.natsOpts, opts...) }
}

// WithConnectWait sets how long Start keeps trying to reach an external
// server that does not answer yet (refused, unreachable, JetStream not
// ready), retrying with a backoff of up to 2 s: a process started while its
// server restarts waits for it instead of exiting. Default 30 s; the
// context given to Start ends the wait too. Authentication errors are not
// retried.
func WithConnectWait(d time.Duration) Option { return func(c *config) { c.connectWait = d } }

// WithSyncAlways sets whether the embedded server syncs every write to
// disk before acknowledging it (nats-server sync_interval: always, the
// default) or on nats-server's default interval (2 minutes) when off.
// Ignored for an external server.
func WithSyncAlways(on bool) Option {
	return func(c *config) { c.syncSet, c.syncAlways, c.syncEvery, c.syncErr = true, on, 0, nil }
}

// WithSyncInterval sets how the embedded server syncs its writes to disk
// (ParseSyncInterval): SyncAlways, the default, fsyncs every write before
// its acknowledgement; a duration such as "2m" fsyncs on that interval,
// faster but not durable against a power loss or a kernel crash: the
// writes acknowledged since the last fsync can be lost (docs/reliability.md).
// Without this option (or WithSyncAlways) an embedded server syncs always,
// unless WithConfigFile's file sets sync_interval. Start fails on a value
// ParseSyncInterval refuses. Ignored for an external server.
func WithSyncInterval(v string) Option {
	return func(c *config) {
		always, every, err := ParseSyncInterval(v)
		c.syncSet, c.syncAlways, c.syncEvery, c.syncErr = err == nil, always, every, err
	}
}

// WithServerLog sends the embedded server's log to stderr.
func WithServerLog() Option { return func(c *config) { c.serverLog = true } }

// FromEnv returns the options the environment asks for: NATS_URL,
// NATS_CREDS, NATS_USER and NATS_PASSWORD, NATS_TOKEN, NATS_NKEY,
// NATS_INBOX_PREFIX, NATS_CA, NATS_CERT and NATS_KEY, WEFT_DATA and
// WEFT_SYNC_INTERVAL (the embedded server's; Start fails on a bad value). Pass
// os.Getenv; options given after these override them.
func FromEnv(getenv func(string) string) []Option {
	var opts []Option
	if v := getenv(EnvURL); v != "" {
		opts = append(opts, WithURL(v))
	}
	if v := getenv(EnvCreds); v != "" {
		opts = append(opts, WithCredsFile(v))
	}
	if u := getenv(EnvUser); u != "" {
		opts = append(opts, WithUserPassword(u, getenv(EnvPassword)))
	}
	if v := getenv(EnvToken); v != "" {
		opts = append(opts, WithToken(v))
	}
	if v := getenv(EnvNkey); v != "" {
		opts = append(opts, WithNkeyFile(v))
	}
	if v := getenv(EnvInboxPrefix); v != "" {
		opts = append(opts, WithInboxPrefix(v))
	}
	if ca, cert := getenv(EnvCA), getenv(EnvCert); ca != "" || cert != "" {
		opts = append(opts, WithTLS(ca, cert, getenv(EnvKey)))
	}
	if v := getenv(EnvData); v != "" {
		opts = append(opts, WithDataDir(v))
	}
	if v := getenv(EnvSyncInterval); v != "" {
		opts = append(opts, WithSyncInterval(v))
	}
	return opts
}

// DefaultDataDir is the embedded store directory used when none is given:
// $XDG_STATE_HOME/weft, or ~/.local/state/weft.
func DefaultDataDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "weft"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("natsnode: no state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "weft"), nil
}

// Node is a connection to NATS JetStream and, when embedded, the server it
// runs. It is safe for concurrent use.
type Node struct {
	srv      *server.Server // nil when external
	unlock   func()
	stopOnce sync.Once
	nc       *nats.Conn
	js       jetstream.JetStream
	url      string
	dataDir  string
	closed   chan struct{}
	// closeOnce closes closed; mu guards nc while connect sets it.
	closeOnce sync.Once
	mu        sync.Mutex
}

func (n *Node) conn() *nats.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nc
}

// Start connects to NATS as the options say: to an external server when a
// URL is given, otherwise to a freshly started embedded one.
func Start(ctx context.Context, opts ...Option) (*Node, error) {
	c := config{readyWait: 10 * time.Second, name: "weft", connectWait: 30 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	if c.syncErr != nil && c.url == "" {
		return nil, c.syncErr
	}
	n := &Node{closed: make(chan struct{})}
	nopts := []nats.Option{
		nats.Name(c.name),
		nats.MaxReconnects(-1),
		nats.ClosedHandler(func(c *nats.Conn) {
			// Only the connection Start returns: a failed attempt of
			// connect closes its own.
			if n.conn() == c {
				n.closeOnce.Do(func() { close(n.closed) })
			}
		}),
	}
	auth, err := c.auth()
	if err != nil {
		return nil, err
	}
	nopts = append(nopts, auth...)
	if c.url != "" {
		n.url = c.url
	} else {
		srv, unlock, err := startServer(&c)
		if err != nil {
			return nil, err
		}
		n.srv, n.unlock, n.dataDir = srv, unlock, c.dataDir
		if c.listen {
			n.url = srv.ClientURL()
		} else {
			nopts = append(nopts, nats.InProcessServer(srv))
		}
	}
	nopts = append(nopts, c.natsOpts...)
	wait := time.Duration(0)
	if n.srv == nil {
		wait = c.connectWait
	}
	if err := n.connect(ctx, nopts, wait); err != nil {
		n.stopServer()
		return nil, err
	}
	return n, nil
}

// connect connects n to n.url and checks that JetStream answers, trying
// again with a backoff for up to wait (0: once) while the server is not
// there yet.
func (n *Node) connect(ctx context.Context, nopts []nats.Option, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	back := backoff.New(100*time.Millisecond, 2*time.Second)
	for {
		err := n.connectOnce(ctx, nopts)
		if err == nil {
			return nil
		}
		d := back.Next()
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrPermissionViolation) ||
			ctx.Err() != nil || !time.Now().Add(d).Before(deadline) {
			return err
		}
		if backoff.Sleep(ctx, d) != nil {
			return err
		}
	}
}

func (n *Node) connectOnce(ctx context.Context, nopts []nats.Option) error {
	nc, err := nats.Connect(n.url, nopts...)
	if err != nil {
		return fmt.Errorf("natsnode: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("natsnode: jetstream: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A reply inbox the server refuses (an inbox prefix the user's
	// permissions do not allow) would leave every call below, and every
	// later one, waiting unanswered: said at once (an *inboxcheck.Refused).
	if err := inboxcheck.Check(actx, nc); err != nil {
		nc.Close()
		return fmt.Errorf("natsnode: %w", err)
	}
	if _, err := js.AccountInfo(actx); err != nil {
		nc.Close()
		return fmt.Errorf("natsnode: jetstream not available: %w", err)
	}
	n.mu.Lock()
	n.nc, n.js = nc, js
	n.mu.Unlock()
	return nil
}

// auth returns the connection's credentials and inbox prefix options.
// They apply to an embedded server too (one started from a configuration
// with users or an operator, such as the one weft dev --secure writes).
func (c *config) auth() ([]nats.Option, error) {
	var opts []nats.Option
	prefix := c.inboxPrefix
	switch {
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
		if prefix == "" {
			p, err := CredsInboxPrefix(c.creds)
			if err != nil {
				return nil, err
			}
			prefix = p
		}
	case c.nkey != "":
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("natsnode: nkey %s: %w", c.nkey, err)
		}
		opts = append(opts, o)
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.pass))
	case c.token != "":
		opts = append(opts, nats.Token(c.token))
	}
	if prefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(prefix))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	return opts, nil
}

// CredsInboxPrefix returns the inbox prefix the user JWT of the creds file
// at path implies: P when its permissions allow subscribing to exactly one
// subject of the form P.> with P _INBOX or starting with "_INBOX.", else ""
// (the default inbox).
func CredsInboxPrefix(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("natsnode: creds: %w", err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return "", fmt.Errorf("natsnode: creds %s: %w", path, err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return "", fmt.Errorf("natsnode: creds %s: %w", path, err)
	}
	found := ""
	for _, s := range uc.Permissions.Sub.Allow {
		if p, ok := strings.CutSuffix(s, ".>"); ok && (p == "_INBOX" || strings.HasPrefix(p, "_INBOX.")) && !strings.ContainsAny(p, "*>") {
			if found != "" {
				return "", nil
			}
			found = p
		}
	}
	return found, nil
}

func startServer(c *config) (*server.Server, func(), error) {
	sopts := &server.Options{}
	if c.configFile != "" {
		o, err := server.ProcessConfigFile(c.configFile)
		if err != nil {
			return nil, nil, fmt.Errorf("natsnode: config %s: %w", c.configFile, err)
		}
		sopts = o
	} else {
		sopts.DontListen = true
	}
	sopts.JetStream = true
	sopts.NoSigs = true
	if sopts.MaxPayload == 0 {
		sopts.MaxPayload = MaxPayload
	}
	switch {
	case c.syncSet:
		sopts.SyncAlways, sopts.SyncInterval = c.syncAlways, c.syncEvery
	case sopts.SyncInterval == 0 && !sopts.SyncAlways:
		// Neither an option nor the configuration file chose: durable,
		// an fsync before every acknowledgement (docs/reliability.md).
		sopts.SyncAlways = true
	}
	if c.dataDir == "" && sopts.StoreDir == "" {
		d, err := DefaultDataDir()
		if err != nil {
			return nil, nil, err
		}
		c.dataDir = d
	}
	if c.dataDir != "" {
		sopts.StoreDir = c.dataDir
	}
	c.dataDir = sopts.StoreDir
	if err := os.MkdirAll(sopts.StoreDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("natsnode: store dir: %w", err)
	}
	unlock, err := lockDir(sopts.StoreDir)
	if err != nil {
		return nil, nil, err
	}
	if c.listen {
		sopts.DontListen = false
		sopts.Host = "127.0.0.1"
		sopts.Port = c.port
		if c.port == 0 {
			sopts.Port = server.RANDOM_PORT
		}
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("natsnode: server: %w", err)
	}
	if c.serverLog {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(c.readyWait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		unlock()
		return nil, nil, errors.New("natsnode: embedded server not ready")
	}
	return srv, unlock, nil
}

// Conn is the node's NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// JetStream is the node's JetStream context.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// URL is the address clients such as the nats CLI can connect to: the
// external URL, the embedded server's loopback listener, or "" for an
// embedded server without a listener.
func (n *Node) URL() string { return n.url }

// Embedded reports whether the node runs its own server.
func (n *Node) Embedded() bool { return n.srv != nil }

// DataDir is the embedded server's store directory ("" when external).
func (n *Node) DataDir() string { return n.dataDir }

// Sync says how the embedded server syncs its writes to disk, as the
// running server reports it: always (an fsync before every
// acknowledgement) or every interval. known is false for an external
// server, whose configuration a client cannot read.
func (n *Node) Sync() (always bool, every time.Duration, known bool) {
	if n.srv == nil {
		return false, 0, false
	}
	jc := n.srv.JetStreamConfig()
	if jc == nil {
		return false, 0, false
	}
	if jc.SyncAlways {
		return true, 0, true
	}
	return false, jc.SyncInterval, true
}

// Close drains the connection (pending publishes and subscriptions finish),
// then shuts an embedded server down and waits for it. If ctx ends first the
// connection is closed without finishing the drain; the server is still shut
// down cleanly.
func (n *Node) Close(ctx context.Context) error {
	var err error
	if n.nc != nil && !n.nc.IsClosed() {
		if derr := n.nc.Drain(); derr != nil {
			n.nc.Close()
		}
		select {
		case <-n.closed:
		case <-ctx.Done():
			n.nc.Close()
			err = fmt.Errorf("natsnode: drain: %w", ctx.Err())
		}
	}
	n.stopServer()
	return err
}

func (n *Node) stopServer() {
	if n.srv == nil {
		return
	}
	n.stopOnce.Do(func() {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.unlock()
	})
}
