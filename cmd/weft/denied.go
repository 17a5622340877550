package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/roles"
)

// deniedHint adds to a permission_denied answer which roles' credentials
// allow the subject it names (roles.Explain, the one place that says so
// for the CLI, package client, the console and the MCP servers), also to
// the cause of a partial answer. Any other error is returned as it is.
func deniedHint(err error) error {
	var pe partialError
	if errors.As(err, &pe) {
		pe.err = deniedHint(pe.err)
		return pe
	}
	return roles.Explain(err)
}

// refusal is a permission the NATS server refused a connection of the
// command: to publish to (or subscribe to) subject.
type refusal struct {
	verb, subject string
}

// notePermission is the connections' error handler: it keeps the last
// permission the server refused (a KV or stream call of audit, retention
// or hold whose $JS.API subject the credentials do not allow), which the
// server says apart from the call, whose request then waits unanswered.
// Any other asynchronous error is left as it was (not printed).
func (e *env) notePermission(_ *nats.Conn, _ *nats.Subscription, err error) {
	verb, subject, ok := api.RefusedSubject(err)
	if !ok {
		return
	}
	e.mu.Lock()
	e.refused = &refusal{verb: verb, subject: subject}
	e.mu.Unlock()
}

// notesRefusals says whether command name maps a call the server
// refused to "not allowed" (refusedAs): not the long-running ones
// (console, mcp, dev), whose end hours after a refusal they tolerated
// says nothing of it.
func notesRefusals(name string) bool {
	switch name {
	case "console", "mcp", "dev":
		return false
	}
	return true
}

// sendsCommands says whether command name sends a command to the command
// API: a refusal of one of its JetStream calls (a view it reads) does not
// end it, since ending it while it waits for a command's answer would
// lose whether the command took effect (outcome_unknown, exit 6), and
// exit 7 says nothing was sent. weft hold sends one when it places or
// releases a hold, not for hold list: it sets env.sends for those.
func sendsCommands(name string) bool {
	switch name {
	case "start", "approve", "reject", "decide", "reconcile", "resolve", "cancel", "settle", "pause", "resume", "restart":
		return true
	}
	return false
}

// refusedAs is the one place a command's failure becomes "not allowed"
// (permission_denied, exit 7) when the server refused one of its
// connections a publish: a KV or stream call it refused is not answered.
// The refusal ends the command at once (endsCommand), and a call that
// failed because it ended is the refusal's permission_denied. A command
// that sends commands is not watched: a call of it that the server
// refused fails as unavailable once its wait ends, though the server said
// why, and is mapped the same way. Only these symptoms are mapped — a failure by the
// command's end or by a wait that ended (waitEnded) — so an outage of
// another kind stays unavailable and a local file error stays exit 5. A
// partial purge or export stays partial (exit 8), saying why it stopped.
// Any other error (a refusal by the service, a problem audit found, a bad
// command line) is returned as it is.
func (e *env) refusedAs(err error) error {
	if err == nil {
		return nil
	}
	var cause *weft.Error
	if e.ctx != nil {
		cause = api.DeniedBy(e.ctx)
	}
	e.mu.Lock()
	r := e.refused
	e.mu.Unlock()
	if cause == nil && r == nil {
		return err
	}
	symptom := func(err error) bool { return waitEnded(err) || (cause != nil && endedByCancel(err)) }
	denied := func(err error) error {
		if cause != nil {
			return &weft.Error{Code: weft.CodePermissionDenied, Message: fmt.Sprintf("not allowed: %s (so: %v)", cause.Message, err)}
		}
		return r.denied(err)
	}
	var pe partialError
	if errors.As(err, &pe) {
		if symptom(pe.err) {
			pe.err = denied(pe.err)
		}
		return pe
	}
	var we *weft.Error
	if errors.As(err, &we) && we.Code != weft.CodeUnavailable && we.Code != weft.CodeInternal {
		return err
	}
	var ue usageError
	var ae auditError
	if errors.As(err, &ue) || errors.As(err, &ae) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || !symptom(err) {
		return err
	}
	return denied(err)
}

// endedByCancel reports whether err is a call that failed because its
// context was canceled, also when an error of retention or audit carries
// it in its message only.
func endedByCancel(err error) bool {
	return errors.Is(err, context.Canceled) || strings.Contains(err.Error(), context.Canceled.Error())
}

// waitEnded reports whether err is a call that failed by its wait ending
// (context.DeadlineExceeded, nats.ErrTimeout), also when an error of
// retention or audit carries it in its message only.
func waitEnded(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, context.DeadlineExceeded.Error()) || strings.Contains(msg, nats.ErrTimeout.Error())
}

// denied is the permission_denied of r, saying what failed because of it.
func (r *refusal) denied(cause error) error {
	return &weft.Error{Code: weft.CodePermissionDenied, Message: fmt.Sprintf("not allowed: the NATS server refused this connection's user permission to %s %s (so: %v)", r.verb, r.subject, cause)}
}
