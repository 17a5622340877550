package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
)

// Violations ends at once the calls over one connection that the server
// refused for the connection's permissions. A KV or stream call (a
// JetStream API request, $JS.API.…, or a KV put, $KV.…) whose publish the
// server refuses is never answered: the server says "Permissions
// Violation" apart from it, to the connection's error handler, and the
// call waits until its context or the JetStream default (5 s) ends.
// Request answers its own publishes at once; Violations does it for the
// calls made through package jetstream, which cannot be asked per call:
// a watch (End, Watch) names the subjects its calls publish to, and the
// first refusal of one of them ends the watch's context with a
// permission_denied *weft.Error naming the subject (context.Cause).
//
// The CLI watches each command's JetStream calls (docs/cli.md, exit 7).
type Violations struct {
	mu      sync.Mutex
	next    nats.ErrHandler
	watches map[*violationWatch]struct{}
}

// violationWatch is one watch: the subjects it takes (match) and how it
// ends (end).
type violationWatch struct {
	match func(verb, subject string) bool
	end   context.CancelCauseFunc
}

// WatchViolations installs on nc an error handler that ends the watches of
// the returned Violations, and calls the handler nc had (if any) for every
// error as before. Call it once per connection and keep the Violations
// for every call over it: each call installs another handler over the
// last, and a later nc.SetErrorHandler drops them all (their watches then
// end only by their contexts).
func WatchViolations(nc *nats.Conn) *Violations {
	r := &Violations{next: nc.ErrorHandler(), watches: map[*violationWatch]struct{}{}}
	nc.SetErrorHandler(r.handle)
	return r
}

// The verbs End's match receives.
const (
	// PublishViolation is the verb of a refused publish.
	PublishViolation = "publish to"
	// SubscribeViolation is the verb of a refused subscription.
	SubscribeViolation = "subscribe to"
)

// End calls end with a permission_denied *weft.Error once the server
// refuses the connection a publish or subscription that match takes (verb
// PublishViolation or SubscribeViolation, and the subject the server named),
// until stop is called. A refusal ends every watch that takes it.
func (r *Violations) End(match func(verb, subject string) bool, end context.CancelCauseFunc) (stop func()) {
	w := &violationWatch{match: match, end: end}
	r.mu.Lock()
	r.watches[w] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.watches, w)
		r.mu.Unlock()
	}
}

// Watch is ctx ended, with the permission_denied as its cause, by the
// first refusal that match takes (End); cancel ends the watch.
func (r *Violations) Watch(ctx context.Context, match func(verb, subject string) bool) (context.Context, context.CancelFunc) {
	ctx, end := context.WithCancelCause(ctx)
	stop := r.End(match, end)
	return ctx, func() { stop(); end(context.Canceled) }
}

// DeniedBy is the permission_denied that ended ctx (a watch of Violations),
// or nil when ctx was not ended by a refusal.
func DeniedBy(ctx context.Context) *weft.Error {
	var we *weft.Error
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &we) && we.Code == weft.CodePermissionDenied {
		return we
	}
	return nil
}

// JetStreamSubject reports whether subject is one a JetStream call
// publishes to: the JetStream API ($JS.API.…, its acks $JS.ACK.…) or a
// KV or object store's own subjects ($KV.…, $O.…).
func JetStreamSubject(subject string) bool {
	for _, p := range []string{"$JS.", "$KV.", "$O."} {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

func (r *Violations) handle(nc *nats.Conn, sub *nats.Subscription, err error) {
	if verb, subject, ok := RefusedSubject(err); ok {
		cause := &weft.Error{Code: weft.CodePermissionDenied, Message: fmt.Sprintf("the NATS server refused this connection's user permission to %s %s", verb, subject)}
		r.mu.Lock()
		for w := range r.watches {
			if w.match(verb, subject) {
				w.end(cause)
			}
		}
		r.mu.Unlock()
	}
	if r.next != nil {
		r.next(nc, sub, err)
	}
}

// RefusedSubject is the verb (PublishViolation or SubscribeViolation) and
// subject of a permissions violation the server sent to a connection's
// error handler (nats.ErrPermissionViolation: `Permissions Violation for
// Publish to "S"`, or `Subscription to "S"`); ok is false for any other
// error.
func RefusedSubject(err error) (verb, subject string, ok bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", "", false
	}
	msg := err.Error()
	lower := strings.ToLower(msg)
	verb = PublishViolation
	i := strings.Index(lower, `publish to "`)
	if i < 0 {
		verb = SubscribeViolation
		i = strings.Index(lower, `subscription to "`)
	}
	if i < 0 {
		return "", "", false
	}
	rest := msg[i+strings.Index(msg[i:], `"`)+1:]
	j := strings.Index(rest, `"`)
	if j < 0 {
		return "", "", false
	}
	return verb, rest[:j], true
}
