// Package adaptertest is the conformance suite every HTTP model adapter
// runs: the failure mapping of docs/semantics.md §2 (which kind, which status,
// which
// retry-after), no retries inside the adapter, no prompt text in errors, and
// usage reported only when given. model/openai and model/anthropic each run
// it against their fake server; what differs between providers is only how
// a reply and an error body are spelled, which the Harness supplies.
package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/fakeserver"
)

// Harness adapts the suite to one provider.
type Harness struct {
	// Start starts the provider's fake server and returns an adapter
	// pointed at it.
	Start func(t *testing.T) (model.Model, *fakeserver.Server)
	// ModelAt returns an adapter pointed at baseURL (for a closed port).
	ModelAt func(baseURL string) model.Model
	// Error is an error response in the provider's shape.
	Error func(status int, typ, message string) fakeserver.Response
	// Text is a successful final answer carrying usage 10 in / 5 out.
	Text func(text string) fakeserver.Response
	// TextNoUsage is a successful final answer without usage.
	TextNoUsage func(text string) fakeserver.Response
}

// secret is prompt text that must never show in an error.
const secret = "PROMPT-SECRET-7f3a"

func request() model.Request {
	return model.Request{
		Run: "r-1", Turn: 1,
		System:     "You are a test. " + secret,
		Transcript: []model.Message{{Role: model.RoleUser, Text: "hello " + secret}},
	}
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	t.Run("Scenario9_StatusKinds", func(t *testing.T) { statusKinds(t, h) })
	t.Run("Scenario9_RetryAfter", func(t *testing.T) { retryAfter(t, h) })
	t.Run("Scenario9_TransportFailures", func(t *testing.T) { transport(t, h) })
	t.Run("Scenario11_TimeoutStopsCall", func(t *testing.T) { timeout(t, h) })
	t.Run("InvalidReply", func(t *testing.T) { invalidReply(t, h) })
	t.Run("Scenario10_Usage", func(t *testing.T) { usage(t, h) })
}

// expectKind calls m once and checks the failure's kind and status.
func expectKind(t *testing.T, ctx context.Context, m model.Model, kind model.ErrorKind, status int) *model.Error {
	t.Helper()
	reply, err := m.Complete(ctx, request())
	if err == nil {
		t.Fatalf("Complete = %+v, want a %s failure", reply, kind)
	}
	var me *model.Error
	if !errors.As(err, &me) {
		t.Fatalf("Complete error %T %v, want *model.Error", err, err)
	}
	if me.Kind != kind {
		t.Fatalf("kind = %s (%v), want %s", me.Kind, me, kind)
	}
	if me.Status != status {
		t.Errorf("status = %d, want %d (%v)", me.Status, status, me)
	}
	if strings.Contains(me.Message, secret) {
		t.Errorf("error message carries prompt text: %q", me.Message)
	}
	return me
}

func statusKinds(t *testing.T, h Harness) {
	cases := []struct {
		status int
		typ    string
		kind   model.ErrorKind
	}{
		{429, "rate_limit_error", model.ErrRateLimited},
		{500, "api_error", model.ErrOverloaded},
		{502, "api_error", model.ErrOverloaded},
		{503, "api_error", model.ErrOverloaded},
		{504, "api_error", model.ErrOverloaded},
		{529, "overloaded_error", model.ErrOverloaded},
		{401, "authentication_error", model.ErrRejected},
		{403, "permission_error", model.ErrRejected},
		{400, "invalid_request_error", model.ErrInvalidRequest},
		{404, "not_found_error", model.ErrInvalidRequest},
		{413, "request_too_large", model.ErrInvalidRequest},
		{422, "invalid_request_error", model.ErrInvalidRequest},
		{408, "timeout_error", model.ErrTimedOut},
		{409, "conflict", model.ErrOther},
	}
	for _, c := range cases {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			m, srv := h.Start(t)
			srv.Enqueue(h.Error(c.status, c.typ, "failure from the fake"))
			me := expectKind(t, context.Background(), m, c.kind, c.status)
			if got := len(srv.Requests()); got != 1 {
				t.Errorf("server saw %d requests, want 1: the adapter must not retry", got)
			}
			if !strings.Contains(me.Message, "failure from the fake") || !strings.Contains(me.Message, c.typ) {
				t.Errorf("message %q does not name the provider's error", me.Message)
			}
			if c.kind.Retryable() != (c.kind == model.ErrRateLimited || c.kind == model.ErrOverloaded || c.kind == model.ErrTimedOut) {
				t.Errorf("Retryable(%s) = %v", c.kind, c.kind.Retryable())
			}
		})
	}
	t.Run("UnreadableErrorBody", func(t *testing.T) {
		m, srv := h.Start(t)
		srv.Enqueue(fakeserver.Response{Status: 503, Header: http.Header{"Content-Type": {"text/html"}}, Body: []byte("<html>busy</html>")})
		expectKind(t, context.Background(), m, model.ErrOverloaded, 503)
	})
}

func retryAfter(t *testing.T, h Harness) {
	cases := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"ms", http.Header{"Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"7"}}, 250 * time.Millisecond},
		{"date", http.Header{"Retry-After": {"Wed, 21 Oct 2026 07:28:30 GMT"}, "Date": {"Wed, 21 Oct 2026 07:28:00 GMT"}}, 30 * time.Second},
		{"none", http.Header{}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, srv := h.Start(t)
			r := h.Error(429, "rate_limit_error", "slow down")
			r.Header = r.Header.Clone()
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.Header.Del("Retry-After")
			r.Header.Del("Retry-After-Ms")
			for k, v := range c.header {
				r.Header[k] = v
			}
			srv.Enqueue(r)
			me := expectKind(t, context.Background(), m, model.ErrRateLimited, 429)
			if me.RetryAfter != c.want {
				t.Errorf("RetryAfter = %v, want %v", me.RetryAfter, c.want)
			}
			if got := len(srv.Requests()); got != 1 {
				t.Errorf("server saw %d requests, want 1", got)
			}
		})
	}
}

func transport(t *testing.T, h Harness) {
	t.Run("ConnectionReset", func(t *testing.T) {
		m, srv := h.Start(t)
		srv.Enqueue(fakeserver.Response{Reset: true})
		expectKind(t, context.Background(), m, model.ErrUnreachable, 0)
		if got := len(srv.Requests()); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	t.Run("ReplyCutShort", func(t *testing.T) {
		m, srv := h.Start(t)
		r := h.Text("a reply that the network cuts in the middle")
		r.Cut = true
		srv.Enqueue(r)
		expectKind(t, context.Background(), m, model.ErrUnreachable, 0)
		if got := len(srv.Requests()); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	t.Run("ConnectionRefused", func(t *testing.T) {
		_, srv := h.Start(t)
		url := srv.URL()
		srv.Close()
		expectKind(t, context.Background(), h.ModelAt(url), model.ErrUnreachable, 0)
	})
}

func timeout(t *testing.T, h Harness) {
	t.Run("Deadline", func(t *testing.T) {
		m, srv := h.Start(t)
		srv.Enqueue(fakeserver.Response{Hang: true}, h.Text("second try"))
		// One second, not less: the hanging response must be the one the
		// first call gets; with 50 ms a loaded machine expired the call before
		// its request reached the server, and the retry below hung on it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		expectKind(t, ctx, m, model.ErrTimedOut, 0)
		// The runtime retries with a fresh deadline; the adapter keeps no
		// state from the stopped call.
		r, err := m.Complete(context.Background(), request())
		if err != nil || r.Kind != model.ReplyFinalAnswer || r.Turn.Text != "second try" {
			t.Fatalf("retry after a timeout = %+v, %v", r, err)
		}
		if got := len(srv.Requests()); got != 2 {
			t.Errorf("server saw %d requests, want 2", got)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		m, _ := h.Start(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		me := expectKind(t, ctx, m, model.ErrOther, 0)
		if me.Kind.Retryable() {
			t.Errorf("a cancelled call must not be retryable")
		}
	})
}

func invalidReply(t *testing.T, h Harness) {
	bodies := map[string]fakeserver.Response{
		"truncated JSON": {Body: []byte(`{"id": "x", "choices": [`)},
		"not JSON":       {Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("hello")},
		"empty object":   {Body: []byte(`{}`)},
		"null":           {Body: []byte(`null`)},
	}
	for _, name := range []string{"truncated JSON", "not JSON", "empty object", "null"} {
		t.Run(name, func(t *testing.T) {
			m, srv := h.Start(t)
			srv.Enqueue(bodies[name])
			expectKind(t, context.Background(), m, model.ErrInvalidReply, 200)
		})
	}
}

func usage(t *testing.T, h Harness) {
	m, srv := h.Start(t)
	srv.Enqueue(h.Text("hello"), h.TextNoUsage("hello"))
	r, err := m.Complete(context.Background(), request())
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyFinalAnswer || r.Turn.Text != "hello" || r.Turn.Role != model.RoleAssistant {
		t.Fatalf("reply = %+v, want final answer hello", r)
	}
	if r.Usage == nil || *r.Usage != (model.Usage{InputTokens: 10, OutputTokens: 5}) {
		t.Errorf("usage = %+v, want 10 in / 5 out", r.Usage)
	}
	r, err = m.Complete(context.Background(), request())
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage != nil {
		t.Errorf("usage = %+v for a reply without usage, want nil (never zero)", *r.Usage)
	}
}

// RawJSON compacts a JSON text for comparisons.
func RawJSON(t testing.TB, s []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(s, &v); err != nil {
		t.Fatalf("not JSON: %s", s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// LookupSchema returns the input schema of BaseRequest's lookup tool, fresh
// bytes on each call.
func LookupSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)
}

// BaseRequest is the first turn of a payment-desk conversation with two
// tools (lookup and refund), which the adapters' own tests start from.
func BaseRequest() model.Request {
	return model.Request{
		Run: "r-1", Turn: 1,
		System:     "You are the payment desk.",
		Transcript: []model.Message{{Role: model.RoleUser, Text: "refund p-1"}},
		Tools: []model.ToolSpec{
			{Name: "lookup", Description: "Look a payment up.", InputSchema: LookupSchema()},
			{Name: "refund", Description: "Refund a payment.", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"cents":{"type":"integer"}}}`)},
		},
	}
}

// Recorded returns request i the server received, failing the test unless
// there is one and it is a POST to path.
func Recorded(t testing.TB, srv *fakeserver.Server, i int, path string) fakeserver.Request {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) <= i {
		t.Fatalf("server saw %d requests, want more than %d", len(reqs), i)
	}
	if reqs[i].Method != "POST" || reqs[i].Path != path {
		t.Fatalf("request %d = %s %s, want POST %s", i, reqs[i].Method, reqs[i].Path, path)
	}
	return reqs[i]
}

// Body is a named raw response body.
type Body struct {
	// Name names the case (a subtest).
	Name string
	// JSON is the body sent with status 200.
	JSON string
}

// InvalidReplies sends each body (a 200 reply the provider's schema does
// not allow: a missing field, a wrong type) to an adapter that start points
// at a fresh fake server, and checks the failure is invalid_reply.
func InvalidReplies(t *testing.T, start func(t *testing.T) (model.Model, *fakeserver.Server), bodies []Body) {
	for _, b := range bodies {
		t.Run(b.Name, func(t *testing.T) {
			m, srv := start(t)
			srv.Enqueue(fakeserver.Response{Body: []byte(b.JSON)})
			_, err := m.Complete(context.Background(), BaseRequest())
			var me *model.Error
			if !errors.As(err, &me) || me.Kind != model.ErrInvalidReply {
				t.Errorf("err = %v, want invalid_reply", err)
			}
		})
	}
}

// FailsBeforeSending checks that req, which the provider cannot express, is
// refused as invalid_request without a request reaching the server.
func FailsBeforeSending(t *testing.T, m model.Model, srv *fakeserver.Server, req model.Request) {
	t.Helper()
	_, err := m.Complete(context.Background(), req)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrInvalidRequest {
		t.Errorf("err = %v, want invalid_request", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server saw %d requests", n)
	}
}

// BenchComplete measures m completing BaseRequest while srv answers every
// request with reply: request building, the SDK, HTTP and reply decoding.
// It reports the provider data kept per turn.
func BenchComplete(b *testing.B, m model.Model, srv *fakeserver.Server, reply fakeserver.Response) {
	srv.Respond(func(fakeserver.Request) fakeserver.Response { return reply })
	req := BaseRequest()
	var pd int
	for b.Loop() {
		r, err := m.Complete(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		pd = len(r.Turn.ProviderData)
	}
	b.ReportMetric(float64(pd), "provider-data-bytes")
}
