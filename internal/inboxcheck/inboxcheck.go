// Package inboxcheck asks the NATS server whether it lets a connection
// subscribe to its reply inbox. A refused subscription is never answered
// to the call that made it: the server says "Permissions Violation for
// Subscription to …" apart from it, to the connection's error handler,
// and every request whose reply comes to that inbox (a JetStream or KV
// call, a follow of the log) waits until its context ends. Check asks
// once, with a PING whose PONG follows the server's verdict on the
// subscription, so that a connection with an inbox prefix its permissions
// do not allow is told at once (docs/protocol.md, permission_denied).
package inboxcheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// checkWait bounds the round trip of Check for a context without a
// deadline.
const checkWait = 10 * time.Second

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

// Check subscribes to a fresh inbox of nc, asks the server (a PING) for
// its verdict and unsubscribes: a *Refused when the server refused the
// subscription, nil when it did not or when no verdict came before ctx
// (or, without a deadline, ten seconds) ended — the calls then fail as
// they would have.
func Check(ctx context.Context, nc *nats.Conn) error {
	if r, _ := Verdict(ctx, nc); r != nil {
		return r
	}
	return nil
}

// Verdict is Check that also says whether the server answered (answered
// false: no verdict before ctx ended, and refused is nil).
func Verdict(ctx context.Context, nc *nats.Conn) (refused *Refused, answered bool) {
	before := nc.LastError()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkWait)
		defer cancel()
	}
	if nc.FlushWithContext(ctx) != nil {
		return nil, false
	}
	if Refuses(nc.LastError(), before, inbox) {
		return &Refused{Inbox: inbox}, true
	}
	return nil, true
}

// Refuses reports whether last, a connection's last error, is the
// server's refusal of its subscription to inbox, newer than before.
func Refuses(last, before error, inbox string) bool {
	if last == nil || last == before {
		return false
	}
	return strings.Contains(strings.ToLower(last.Error()), strings.ToLower(`subscription to "`+inbox+`"`))
}
