package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/inboxcheck"
)

// permissionCheckWait bounds the round trip that asks the server whether
// it refused a request's publish, for a context without a deadline.
const permissionCheckWait = 10 * time.Second

// Request sends data to subject and waits for the reply, as
// nats.Conn.RequestWithContext does, with one difference: a publish (or the
// reply inbox's subscription) that the server refuses for the connection's
// permissions is answered at once with a *weft.Error permission_denied
// naming the subject, instead of a wait until ctx ends. The server says
// "Permissions Violation" asynchronously and no reply ever comes; Request
// follows the publish with a PING, whose PONG comes after the server's
// verdict on the publish, and reads the connection's last error then.
// A subject without responders is nats.ErrNoResponders, as for
// RequestWithContext.
//
// The first request over a connection first asks the server whether it
// refuses the connection's reply inbox (inboxcheck.Once: one round trip
// per connection, again after a reconnect; concurrent first requests wait
// for one check): a request whose reply subscription is refused would
// still be published, and carried out, while its sender is told
// permission_denied. Refused, nothing is published; without a verdict
// neither (ctx's error, or unavailable). An inbox refused after the
// request was published (permissions narrowed since the check) is
// outcome_unknown, never permission_denied, and the connection is asked
// again by its next request.
//
// The requests a person's client makes go through it (the command API,
// the queries, the catalog), so that the CLI, package client, the console
// and weft mcp serve all answer permission_denied (docs/protocol.md)
// rather than a timeout. A tool worker's reports do not: a worker keeps a
// report it could not deliver and sends it again until a runner answers,
// which a permission refusal must not stop.
func Request(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing is sent for a caller that has gone
	}
	if err := checkInbox(ctx, nc); err != nil {
		return nil, err
	}
	before := nc.LastError()
	inbox := nc.NewInbox()
	replies := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, err
	}
	checked := make(chan error, 1)
	go func() {
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			fctx, cancel = context.WithTimeout(ctx, permissionCheckWait)
		}
		defer cancel()
		if nc.FlushWithContext(fctx) != nil {
			checked <- nil // no verdict: wait for the reply as usual
			return
		}
		checked <- denied(nc, nc.LastError(), before, subject, inbox)
	}()
	for {
		select {
		case m := <-replies:
			if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		case err := <-checked:
			if err != nil {
				return nil, err
			}
			checked = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// checkInbox asks the server, once per connection (inboxcheck.Once),
// whether it refuses the connection's reply inbox: permission_denied
// naming the inbox when it does. Without a verdict nothing may be
// published: ctx's error when ctx ended, nats.ErrConnectionClosed when nc
// is closed, else unavailable (nothing was sent; a retry asks again). A
// connection lost while it is asked is asked again after it reconnects
// (inboxcheck.Once), while ctx lasts.
func checkInbox(ctx context.Context, nc *nats.Conn) error {
	refused, err := inboxcheck.Once(ctx, nc)
	switch {
	case refused != nil:
		return &weft.Error{Code: weft.CodePermissionDenied, Message: refused.Error()}
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, nats.ErrConnectionClosed) && nc.IsClosed():
		return err
	}
	return &weft.Error{Code: weft.CodeUnavailable, Message: "no verdict from the NATS server on whether this connection may subscribe to its reply inbox, so the request was not sent: " + err.Error()}
}

// denied is the permission_denied of the server's refusal to let this
// connection publish to subject, when last — the connection's last error
// after the request — is such a refusal newer than before; and
// outcome_unknown when it is the refusal of the request's own inbox (the
// request was published, its reply cannot come). The refusal of another
// subscription under the inbox prefix (a JetStream call's
// <prefix>.<id>.*, or another request's) does not say that this reply
// cannot come: the connection's verdict is forgotten (its next request
// asks again) and the request waits for its reply.
func denied(nc *nats.Conn, last, before error, subject, inbox string) error {
	if last == nil || last == before || !errors.Is(last, nats.ErrPermissionViolation) {
		return nil
	}
	msg := strings.ToLower(last.Error())
	switch {
	case strings.Contains(msg, strings.ToLower(`publish to "`+subject+`"`)):
		return &weft.Error{Code: weft.CodePermissionDenied, Message: fmt.Sprintf("the NATS server refused this connection's user permission to publish to %s", subject)}
	case inboxcheck.Refuses(last, before, inbox):
		// The request was published: the inbox was allowed when it was
		// checked, and is refused now (the user's permissions were
		// narrowed, or the connection moved to a server that grants
		// others). It may be carried out; no reply can come.
		inboxcheck.Forget(nc)
		return &weft.Error{Code: weft.CodeOutcomeUnknown, Message: fmt.Sprintf("the request to %s was sent, but the NATS server then refused this connection's user permission to subscribe to its reply inbox %s, so no answer can come: it may have been carried out (read the run to learn whether it was; set the inbox prefix its permissions allow: --inbox-prefix, NATS_INBOX_PREFIX)", subject, inbox)}
	}
	if inboxcheck.RefusesUnder(last, before, inboxcheck.Prefix(inbox)) {
		inboxcheck.Forget(nc)
	}
	return nil
}

// ReasonUnreadableReply is the Reason of the internal error ReplyError
// answers for a reply it cannot read: whether the request was carried out
// is unknown.
const ReasonUnreadableReply = "unreadable_reply"

// ReplyError returns the *weft.Error an error reply (ErrorReply) carries,
// or nil for a success: the one reading of the error envelope that every
// requester shares (api.Client, the query client, the catalog client, the
// worker's reports and settlements, a runner's forwarded commands;
// docs/protocol.md "Error codes"; docs/adr/0034). It is
// strict, since a reply it cannot read is no answer: a requester that
// reads it as a success would take a report or a settlement as recorded.
//
//   - A body that is the envelope with an error is that error; one whose
//     error has no code is internal.
//   - A body that is not the envelope (not JSON, not an object, a member
//     of the wrong type: {"error":"refused"}, a JetStream API error's
//     numeric code) is internal, "unreadable reply".
//   - A reply whose Nats-Service-Error-Code header marks an error and whose
//     body is empty or carries no error is the header's code
//     (Nats-Service-Error); a header code that is empty or not a protocol
//     code is internal.
//   - An empty body without that header is internal: Weft services always
//     send a body.
//
// An unreadable reply is internal with Reason ReasonUnreadableReply: the
// request may have been carried out (the answer, not the request, is
// what could not be read).
//
// internal is a code the worker sends its report again for (worker's
// retryable) and the worker's settlement answers settle_unconfirmed for;
// api.Client returns it as an error.
func ReplyError(m *nats.Msg) *weft.Error {
	var er ErrorReply
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &er); err != nil {
			return &weft.Error{Code: weft.CodeInternal, Reason: ReasonUnreadableReply, Message: "unreadable reply: " + err.Error()}
		}
		if er.Error != nil {
			if er.Error.Code == "" {
				return &weft.Error{Code: weft.CodeInternal, Reason: ReasonUnreadableReply, Message: "unreadable reply: an error without a code: " + string(m.Data)}
			}
			return er.Error
		}
	}
	if st := m.Header.Get("Nats-Service-Error-Code"); st != "" {
		c := weft.Code(m.Header.Get("Nats-Service-Error"))
		if _, ok := statuses[c]; !ok {
			return &weft.Error{Code: weft.CodeInternal, Reason: ReasonUnreadableReply, Message: fmt.Sprintf("unreadable reply: an error header %s whose code %q is not a protocol code", st, c)}
		}
		return &weft.Error{Code: c, Message: "error reply without a body: " + st}
	}
	if len(m.Data) == 0 {
		return &weft.Error{Code: weft.CodeInternal, Reason: ReasonUnreadableReply, Message: "unreadable reply: an empty body"}
	}
	return nil
}
