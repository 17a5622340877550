package httperr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftrun/weft/model"
)

func TestStatusKind(t *testing.T) {
	want := map[int]model.ErrorKind{
		400: model.ErrInvalidRequest, 401: model.ErrRejected, 403: model.ErrRejected, 404: model.ErrInvalidRequest,
		408: model.ErrTimedOut, 409: model.ErrOther, 413: model.ErrInvalidRequest, 422: model.ErrInvalidRequest,
		429: model.ErrRateLimited, 500: model.ErrOverloaded, 501: model.ErrOverloaded, 502: model.ErrOverloaded,
		503: model.ErrOverloaded, 504: model.ErrOverloaded, 529: model.ErrOverloaded, 418: model.ErrOther,
	}
	for _, status := range []int{400, 401, 403, 404, 408, 409, 413, 418, 422, 429, 500, 501, 502, 503, 504, 529} {
		if got := StatusKind(status); got != want[status] {
			t.Errorf("StatusKind(%d) = %s, want %s", status, got, want[status])
		}
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After-Ms": {"12.5"}}, 12500 * time.Microsecond},
		{http.Header{"Retry-After-Ms": {"junk"}, "Retry-After": {"2"}}, 2 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"-3"}}, 0},
		{http.Header{"Retry-After": {"Wed, 21 Oct 2026 07:28:00 GMT"}}, 0}, // no Date: no clock to measure from
		{http.Header{"Retry-After": {"Wed, 21 Oct 2026 07:28:00 GMT"}, "Date": {"Wed, 21 Oct 2026 07:29:00 GMT"}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
	}
	for _, c := range cases {
		if got := RetryAfter(c.h); got != c.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", c.h, got, c.want)
		}
	}
}

func TestClassifyWithoutResponse(t *testing.T) {
	dns := &url.Error{Op: "Post", URL: "https://api.example.invalid/v1", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "api.example.invalid"}}}
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}
	cases := []struct {
		err  error
		kind model.ErrorKind
	}{
		{dns, model.ErrUnreachable},
		{refused, model.ErrUnreachable},
		{&url.Error{Op: "Post", URL: "x", Err: io.EOF}, model.ErrUnreachable},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), model.ErrTimedOut},
		{context.Canceled, model.ErrOther},
		{errors.New("something else"), model.ErrOther},
		{&model.Error{Kind: model.ErrRejected}, model.ErrRejected},
	}
	for _, c := range cases {
		got := Classify("p", c.err, nil)
		if got.Kind != c.kind {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got.Kind, c.kind)
		}
		if strings.Contains(got.Message, "api.example.invalid/v1") {
			t.Errorf("message carries the URL: %q", got.Message)
		}
	}
	if Classify("p", nil, nil) != nil {
		t.Errorf("Classify(nil) != nil")
	}
}

func TestClassifyWithResponse(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}}
	if got := Classify("p", &WireError{Err: io.ErrUnexpectedEOF}, resp); got.Kind != model.ErrUnreachable {
		t.Errorf("wire error = %s, want unreachable", got.Kind)
	}
	if got := Classify("p", fmt.Errorf("error parsing response json: %w", io.ErrUnexpectedEOF), resp); got.Kind != model.ErrInvalidReply || got.Status != 200 {
		t.Errorf("decode error = %+v, want invalid_reply with status 200", got)
	}
	r429 := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}, Body: io.NopCloser(strings.NewReader("not json"))}
	if got := Classify("p", errors.New("unmarshal error body"), r429); got.Kind != model.ErrRateLimited || got.RetryAfter != 3*time.Second || got.Status != 429 {
		t.Errorf("429 with an unreadable body = %+v", got)
	}
}
