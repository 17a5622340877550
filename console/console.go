// Package console is Weft's operator console: a web page where the people
// who answer approvals and reconcile uncertain effects do their work and read
// what a run did. It is an HTTP server (loopback by default) that talks to
// Weft only through the public APIs over NATS request/reply — the command
// API (weft.api.*) and the query service (weft.api.query.*), through
// package client as any application, and the catalog (weft.api.catalog.*,
// package catalog) — so it works against any deployment that serves them.
//
// # Pages
//
//   - "/" the inbox: what waits for a person, one section per kind
//     (pending approvals, uncertain effects, open questions), each item
//     with its form and its shareable link, narrowed by the filters of
//     filter.go (GET parameters, which "/batch" takes too).
//   - "/runs" the runs: a filtered, paged list, newest change first, a
//     search by run id (exact or prefix), and a form that starts a run.
//   - "/runs/<run>" one run: status, what waits for a person, actions with
//     their states and attempts, the transcript, the event timeline (the
//     lines `weft events` prints), child runs and the audit panel (the
//     checks of `weft audit verify`, on the history the query service
//     returns), and "/runs/<run>/history" its history as a file, the
//     export `weft audit export` writes.
//
// Pages are server-rendered html/template with one small script
// (assets/app.js) that shows times in the viewer's zone, sends forms
// without reloading, and swaps in fresh regions when the server-sent event
// stream at "/live" says the data changed (the console polls the query
// service once per interval per distinct view some page has open, and a
// tab in the background closes its stream); without the script every page
// and form still works. Templates, script and style are embedded (embed.FS):
// nothing is fetched at run time.
//
// # Acting
//
// Every form carries a command id chosen when the page was rendered, so a
// double click or a resent form acts once (the command API keeps the first
// answer per command id). A refusal shows its error code, reason and
// message; the form then gets a new command id. Credentials typed into a
// form are sent to the command API and never written into a page, a URL or
// a log. A signing key (an nkey seed) is never sent at all: the page's
// script signs in the browser, an approval proof or a person's command
// proof (sign.go), and sends the proof.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
)

//go:embed assets
var assets embed.FS

// DefaultAddr is the address `weft console` and `weft dev` listen on
// unless told otherwise: loopback only.
const DefaultAddr = "127.0.0.1:8480"

// Option configures New.
type Option func(*Console)

// WithLogger sets the logger (default: discard). Nothing secret is logged:
// no credential, no tool argument or result.
func WithLogger(l *slog.Logger) Option { return func(c *Console) { c.log = l } }

// WithPoll sets how often the data an open page shows is checked for
// changes (default 1 s); the page updates within about this long. Pages
// that show the same thing share one check.
func WithPoll(d time.Duration) Option { return func(c *Console) { c.poll = d } }

// WithTimeout bounds each request to Weft (default 10 s).
func WithTimeout(d time.Duration) Option { return func(c *Console) { c.timeout = d } }

// WithRetry bounds how long a command answered with a retryable code
// (weft.Code.Retryable: runner_busy, contended, conflict, unavailable,
// settle_unconfirmed) is sent again, with the same command id, before the
// answer is shown (default api.DefaultRetryWithin; docs/protocol.md,
// "Retry rules"). d <= 0 sends each command once.
func WithRetry(d time.Duration) Option { return func(c *Console) { c.retry = max(d, 0) } }

// WithApprover names the approver the approval forms offer first when the
// catalog does not list an agent's approvers.
func WithApprover(name string) Option { return func(c *Console) { c.approver = name } }

// WithCredentialHelp sets the sentence shown under every credential field,
// such as what the demo approver accepts.
func WithCredentialHelp(text string) Option { return func(c *Console) { c.credentialHelp = text } }

// WithStart offers agent as the default of the start form, with example
// inputs.
func WithStart(agent string, examples ...string) Option {
	return func(c *Console) { c.startAgent, c.startExamples = agent, examples }
}

// Console is the console's HTTP handler. It is safe for concurrent use.
type Console struct {
	// client sends the commands and the queries (package client, as any
	// application does).
	client  *client.Client
	catalog *catalog.Client
	// js reads a run's legal holds (weft_holds: retention.HoldsOf), which
	// no query answers; credentials that may not read the bucket show
	// only what the hold forms answer.
	js jetstream.JetStream
	// holdsDenied is set once the console's credentials were refused the
	// holds bucket (an operator's or a reader's: docs/security.md, "The
	// roles"): the pages no longer ask.
	holdsDenied atomic.Bool
	// violations ends a read the server refused at once (its permission
	// violation), instead of at its deadline.
	violations *api.Violations
	log        *slog.Logger
	poll       time.Duration
	timeout    time.Duration
	retry      time.Duration // the bound of a command's retries (WithRetry)

	approver       string
	credentialHelp string
	startAgent     string
	startExamples  []string

	pages   map[string]*template.Template
	static  http.Handler
	handler http.Handler
	// sections are the inbox's sections, in page order.
	sections []section

	catMu    sync.Mutex
	catCache map[events.AgentRef]cached

	// watches are the views open pages follow live (live.go).
	watches watches
}

// New returns a console that talks to Weft over nc. It sets nc's error
// handler to one that watches permission violations (api.WatchViolations)
// and calls the handler nc had before: each New over one connection
// installs another, and a later nc.SetErrorHandler drops it (a refused
// read of weft_holds then ends at holdsWait, not at the refusal).
func New(nc *nats.Conn, opts ...Option) (*Console, error) {
	c := &Console{
		catalog:  catalog.NewClient(nc),
		log:      slog.New(slog.DiscardHandler),
		poll:     time.Second,
		timeout:  10 * time.Second,
		retry:    api.DefaultRetryWithin,
		catCache: map[events.AgentRef]cached{},
	}
	for _, o := range opts {
		o(c)
	}
	w, err := client.New(nc, client.WithRetry(c.retry))
	if err != nil {
		return nil, err
	}
	c.client = w
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c.js = js
	c.violations = api.WatchViolations(nc)
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c.pages = pages
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix("/static/", http.FileServerFS(static))
	c.sections = []section{approvalsSection{c}, uncertainSection{c}, questionsSection{c}}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.inbox)
	mux.HandleFunc("GET /runs", c.runs)
	mux.HandleFunc("GET /runs/{run}", c.run)
	mux.HandleFunc("GET /runs/{run}/history", c.historyDownload)
	mux.HandleFunc("GET /live", c.live)
	mux.HandleFunc("GET /static/", c.serveStatic)
	mux.HandleFunc("GET /batch", c.batch)
	mux.HandleFunc("POST /batch", c.batch)
	mux.HandleFunc("POST /act/approval", c.actApproval)
	mux.HandleFunc("POST /act/reconcile", c.actReconcile)
	mux.HandleFunc("POST /act/resolve", c.actResolve)
	mux.HandleFunc("POST /act/start", c.actStart)
	mux.HandleFunc("POST /act/cancel", c.actCancel)
	mux.HandleFunc("POST /act/pause", c.actPause)
	mux.HandleFunc("POST /act/restart", c.actRestart)
	mux.HandleFunc("POST /act/hold", c.actHold)
	mux.HandleFunc("POST /act/release_hold", c.actReleaseHold)
	// Cross-origin POSTs are refused (a page on another site cannot make
	// the viewer's browser approve a payment here).
	protect := http.NewCrossOriginProtection()
	c.handler = secureHeaders(protect.Handler(mux))
	return c, nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	c.static.ServeHTTP(w, r)
}

// secureHeaders sets the headers every answer carries: a content security
// policy that allows only the console's own script and style, no framing,
// no referrer, no caching of pages.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if h.Get("Cache-Control") == "" {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// Serve serves the console on ln until ctx ends, then shuts the server down
// (open live streams end). It returns nil after a shutdown.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	c.watches.wait() // every stream has ended: their polls stop
	return err
}

// Listen opens addr for the console ("127.0.0.1:8480"; port 0 picks a free
// one) and returns the listener and the console's URL.
func Listen(addr string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("console: listen %s: %w", addr, err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}

// newCommandID returns a fresh command id for a form.
func newCommandID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "console-" + hex.EncodeToString(b[:])
}

// newRunID returns a run id for a start form without one: "run-" and 20
// random hex digits.
func newRunID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}

func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.timeout)
}

// actCtx bounds an action's request: the timeout, plus the retries of a
// retryable answer (WithRetry).
func (c *Console) actCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.timeout+c.retry)
}
