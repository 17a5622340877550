// Package httperr maps the failures of an HTTP call to a model provider onto
// the model port's closed set of failure kinds (model.ErrorKind). Both
// adapters (model/openai, model/anthropic) classify every error through
// Classify, so the table of docs/semantics.md §2 lives in exactly one place.
//
// Classify reads no clock: a Retry-After given as an HTTP date is measured
// against the response's own Date header, and ignored when that is missing.
package httperr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft/model"
)

// StatusKind returns the failure kind of an HTTP error status:
// 429 rate_limited; 408 timed_out; 500, 502, 503, 504, 529 and any other 5xx
// overloaded; 401 and 403 rejected; 400, 404, 413 and 422 invalid_request;
// anything else other.
func StatusKind(status int) model.ErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		return model.ErrRateLimited
	case status == http.StatusRequestTimeout:
		return model.ErrTimedOut
	case status == 529 || (status >= 500 && status <= 599):
		return model.ErrOverloaded
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return model.ErrRejected
	case status == http.StatusBadRequest || status == http.StatusNotFound ||
		status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity:
		return model.ErrInvalidRequest
	}
	return model.ErrOther
}

// RetryAfter returns the delay a response asks for: the retry-after-ms
// header (milliseconds, possibly fractional) when present, else retry-after
// in seconds, else retry-after as an HTTP date measured from the response's
// Date header. It returns zero when none can be read or the delay is negative.
func RetryAfter(h http.Header) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	now, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return 0
	}
	if d := at.Sub(now); d > 0 {
		return d
	}
	return 0
}

// Classify turns the error of one SDK call into a *model.Error. resp is the
// HTTP response the SDK saw (captured with the SDK's WithResponseInto
// option), nil when no response arrived. provider names the provider in the
// message ("openai", "anthropic"). Classify returns nil when err is nil.
//
// The order of the checks matters: the caller's context first (a deadline is
// timed_out, a cancellation other), then an HTTP error status, then
// transport failures (a *WireError from Middleware, or a connection error
// before any response: unreachable, or timed_out for a network timeout),
// then a reply that arrived but could not be decoded (invalid_reply).
func Classify(provider string, err error, resp *http.Response) *model.Error {
	if err == nil {
		return nil
	}
	var me *model.Error
	if errors.As(err, &me) {
		return me
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &model.Error{Kind: model.ErrTimedOut, Message: provider + ": call stopped by the model timeout"}
	case errors.Is(err, context.Canceled):
		return &model.Error{Kind: model.ErrOther, Message: provider + ": call cancelled"}
	}
	if resp != nil && resp.StatusCode >= 400 {
		return FromStatus(provider, resp)
	}
	var we *WireError
	if errors.As(err, &we) || (resp == nil && transport(err)) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return &model.Error{Kind: model.ErrTimedOut, Message: fmt.Sprintf("%s: %s", provider, transportDetail(err))}
		}
		return &model.Error{Kind: model.ErrUnreachable, Message: fmt.Sprintf("%s: %s", provider, transportDetail(err))}
	}
	if resp != nil {
		return &model.Error{Kind: model.ErrInvalidReply, Status: resp.StatusCode, Message: fmt.Sprintf("%s: reply could not be read: %v", provider, err)}
	}
	return &model.Error{Kind: model.ErrOther, Message: fmt.Sprintf("%s: %v", provider, err)}
}

// WireError marks a failure of the connection itself: sending the request
// or reading the reply's bytes off the wire. Middleware produces it, so that
// Classify can tell a reply cut short by the network (retryable) from a
// complete reply that does not decode (invalid_reply), even though both
// surface from the SDKs as an unexpected EOF.
type WireError struct {
	// Err is the transport's error.
	Err error
}

// Error returns the transport's error text.
func (e *WireError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *WireError) Unwrap() error { return e.Err }

// Middleware is an SDK middleware (both SDKs' option.WithMiddleware accept
// it) that marks transport failures and reply-body read failures as
// *WireError.
func Middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if err != nil {
		if req.Context().Err() != nil {
			return resp, err
		}
		return resp, &WireError{Err: err}
	}
	if resp != nil && resp.Body != nil {
		resp.Body = &wireBody{ReadCloser: resp.Body, ctx: req.Context()}
	}
	return resp, nil
}

// wireBody marks read failures of a reply body as *WireError.
type wireBody struct {
	io.ReadCloser
	ctx context.Context
}

func (b *wireBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() == nil {
		err = &WireError{Err: err}
	}
	return n, err
}

// FromStatus returns the *model.Error of an HTTP error response: its kind
// from StatusKind, RetryAfter from the headers, and a message naming the
// status and the provider's error type, code and message when the body has
// the common {"error": {"type", "code", "message"}} shape.
func FromStatus(provider string, resp *http.Response) *model.Error {
	e := &model.Error{
		Kind:       StatusKind(resp.StatusCode),
		Status:     resp.StatusCode,
		RetryAfter: RetryAfter(resp.Header),
	}
	msg := fmt.Sprintf("%s: HTTP %d", provider, resp.StatusCode)
	if detail := bodyDetail(resp); detail != "" {
		msg += ": " + detail
	}
	e.Message = msg
	return e
}

// maxDetail bounds the provider's error text kept in a message.
const maxDetail = 300

// bodyDetail reads the provider's error type, code and message from an
// error body the SDK re-populated. It never fails: an unreadable body gives "".
func bodyDetail(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ""
	}
	var body struct {
		Error struct {
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return ""
	}
	var parts []string
	if body.Error.Type != "" {
		parts = append(parts, body.Error.Type)
	}
	var code string
	if json.Unmarshal(body.Error.Code, &code) == nil && code != "" && code != body.Error.Type {
		parts = append(parts, code)
	}
	out := strings.Join(parts, "/")
	if m := body.Error.Message; m != "" {
		if len(m) > maxDetail {
			m = m[:maxDetail] + "…"
		}
		if out != "" {
			out += ": "
		}
		out += m
	}
	return out
}

// transport reports whether err is a failure to reach the provider or to
// read its reply off the wire: refused, reset, DNS, an early EOF.
func transport(err error) bool {
	var (
		ne  net.Error
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.As(err, &dns), errors.As(err, &op), errors.As(err, &ne):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	return false
}

// transportDetail names a transport failure without the request URL (which
// may carry credentials in a proxy setup).
func transportDetail(err error) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return "DNS lookup failed: " + dns.Err
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the reply was complete"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Op + ": " + op.Err.Error()
	}
	return "transport failure"
}
