// Package inboxcheck asks the NATS server whether it lets a connection
// subscribe to its reply inbox. A refused subscription is never answered
// to the call that made it: the server says "Permissions Violation for
// Subscription to …" apart from it, to the connection's error handler,
// and every request whose reply comes to that inbox (a JetStream or KV
// call, a follow of the log) waits until its context ends. Once asks,
// with a PING whose PONG follows the server's verdict on the
// subscription, so that a connection with an inbox prefix its permissions
// do not allow is told at once (docs/protocol.md, permission_denied).
//
// A verdict that the inbox is allowed is kept for the connection until it
// reconnects (another server may grant other permissions) or Forget is
// called (a later refusal: the user's permissions were narrowed), so a
// connection is asked once, not once per call. One check of a connection
// runs at a time; concurrent callers wait for it.
//
// The check subscribes to the shape of nats.Conn.NewInbox
// (<prefix>.<id>). JetStream calls subscribe to <prefix>.<id>.* as well:
// permissions that allow only one of the two shapes (_INBOX.* or
// _INBOX.*.*, rather than _INBOX.>) are judged by the first one.
package inboxcheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
)

// checkWait bounds a check (all its round trips) for a context without a
// deadline.
const checkWait = 10 * time.Second

// ErrNoVerdict is Once's error when the server answered but the
// connection's last error was another call's every time until the check's
// time ran out: whether the inbox is refused is unknown.
var ErrNoVerdict = errors.New("inboxcheck: no verdict on the reply inbox: the connection's last error was another call's")

// Refused is the server's refusal of a connection's subscription to its
// reply inbox. It is a nats.ErrPermissionViolation (errors.Is).
type Refused struct {
	// Inbox is the subject refused: one under the connection's inbox
	// prefix.
	Inbox string
}

// Error says which inbox the server refused and how to set another.
func (e *Refused) Error() string {
	return fmt.Sprintf("the NATS server refused this connection's user permission to subscribe to its reply inbox %s (set the inbox prefix its permissions allow: --inbox-prefix, NATS_INBOX_PREFIX)", e.Inbox)
}

// Unwrap makes a Refused a nats.ErrPermissionViolation.
func (e *Refused) Unwrap() error { return nats.ErrPermissionViolation }

// Check is Once for callers that go on without a verdict: a *Refused
// when the server refused the inbox, nil when it did not or when no
// verdict came — the calls then fail as they would have.
func Check(ctx context.Context, nc *nats.Conn) error {
	if r, _ := Once(ctx, nc); r != nil {
		return r
	}
	return nil
}

// memo is what is known of one connection's inbox.
type memo struct {
	turn       chan struct{} // capacity 1: one check at a time
	mu         sync.Mutex
	allowed    bool
	reconnects uint64 // nc.Stats().Reconnects when allowed was judged
	forgets    uint64 // Forget calls so far: a check that began before one does not keep its verdict
}

var memos sync.Map // weak.Pointer[nats.Conn] -> *memo

func memoOf(nc *nats.Conn) *memo {
	k := weak.Make(nc)
	if m, ok := memos.Load(k); ok {
		return m.(*memo)
	}
	m, loaded := memos.LoadOrStore(k, &memo{turn: make(chan struct{}, 1)})
	if !loaded {
		runtime.AddCleanup(nc, func(k weak.Pointer[nats.Conn]) { memos.Delete(k) }, k)
	}
	return m.(*memo)
}

func (m *memo) allowedNow(nc *nats.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allowed && m.reconnects == nc.Stats().Reconnects
}

// allow keeps the verdict "allowed" of a check that began after
// reconnects reconnects and forgets Forget calls, unless nc was forgotten
// since: the refusal that made a caller Forget may be newer than the
// check's answer.
func (m *memo) allow(reconnects, forgets uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.forgets == forgets {
		m.allowed, m.reconnects = true, reconnects
	}
}

func (m *memo) forgetsNow() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forgets
}

// Once asks the server whether it refuses nc's reply inbox, unless a
// verdict that it allows it is kept for nc (since nc's last reconnect, and
// not forgotten). It answers a *Refused when the server refused it; nil,
// nil when it allowed it; and nil with an error when no verdict came:
// ctx's error, nats.ErrConnectionClosed when nc is closed, the
// subscription's error, or ErrNoVerdict (context.DeadlineExceeded when the
// connection did not answer) when ctx had no deadline and checkWait ran
// out. It asks again while ctx (or checkWait) lasts when an answer carries
// no verdict: another call's error replaced the check's, or the
// connection was lost while it asked and is reconnecting (the next ask
// goes out after the reconnect). A refusal is not kept: the next call asks
// again.
func Once(ctx context.Context, nc *nats.Conn) (*Refused, error) {
	m := memoOf(nc)
	if m.allowedNow(nc) {
		return nil, nil
	}
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-m.turn }()
	if m.allowedNow(nc) {
		return nil, nil // judged by the check this one waited for
	}
	cctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, checkWait)
		defer cancel()
	}
	for {
		reconnects, forgets := nc.Stats().Reconnects, m.forgetsNow()
		refused, err := verdict(cctx, nc)
		switch {
		case refused != nil:
			return refused, nil
		case err == nil:
			m.allow(reconnects, forgets)
			return nil, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err == ErrNoVerdict, errors.Is(err, nats.ErrConnectionClosed) && !nc.IsClosed():
			if cctx.Err() != nil {
				return nil, ErrNoVerdict
			}
			continue
		}
		return nil, err
	}
}

// Forget drops the verdict kept for nc: the next Once asks again, and a
// check under way when it is called keeps no verdict. A caller that
// learns its inbox was refused after all (the user's permissions were
// narrowed) calls it.
func Forget(nc *nats.Conn) {
	if m, ok := memos.Load(weak.Make(nc)); ok {
		m := m.(*memo)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.allowed = false
		m.forgets++
	}
}

// verdict subscribes to a fresh inbox of nc, asks the server (a PING) for
// its verdict and unsubscribes. The connection's last error after the PONG
// is the verdict: unchanged, the inbox is allowed; the refusal of a
// subscription under nc's inbox prefix (this one's, or another call's
// whose refusal replaced it), refused; another error, none (ErrNoVerdict).
func verdict(ctx context.Context, nc *nats.Conn) (*Refused, error) {
	before := nc.LastError()
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, make(chan *nats.Msg, 1))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	last := nc.LastError()
	switch {
	case last == nil || last == before:
		return nil, nil
	case RefusesUnder(last, before, Prefix(inbox)):
		return &Refused{Inbox: inbox}, nil
	}
	return nil, ErrNoVerdict
}

// Prefix is the inbox prefix of inbox, a subject of nats.Conn.NewInbox,
// with its trailing dot.
func Prefix(inbox string) string { return inbox[:strings.LastIndex(inbox, ".")+1] }

// Refuses reports whether last, a connection's last error, is the
// server's refusal of its subscription to inbox, newer than before.
func Refuses(last, before error, inbox string) bool {
	return refusal(last, before, `subscription to "`+inbox+`"`)
}

// RefusesUnder reports whether last, a connection's last error, is the
// server's refusal of a subscription to a subject beginning with prefix,
// newer than before.
func RefusesUnder(last, before error, prefix string) bool {
	return refusal(last, before, `subscription to "`+prefix)
}

func refusal(last, before error, says string) bool {
	if last == nil || last == before {
		return false
	}
	return strings.Contains(strings.ToLower(last.Error()), strings.ToLower(says))
}
