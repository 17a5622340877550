package mcptools

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOnlyTheCallsOwnPOSTSaysWhetherItWasSent (docs/semantics.md §3: a request
// that
// was sent is never reported as not sent): after a tools/call's POST was
// delivered, the SDK sends more POSTs with the call's context — the
// notifications/cancelled of a call stopped by its timeout, the follow-up
// of a multi round trip — and one of those failing to connect (the server
// stopped accepting connections meanwhile) says nothing about the call's
// own request. Before, any POST that could not connect marked the call not
// sent, so a call the server was acting on became Explain.
func TestOnlyTheCallsOwnPOSTSaysWhetherItWasSent(t *testing.T) {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer live.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String() + "/mcp"
	l.Close()

	post := func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		res, err := trackingTransport{base: http.DefaultTransport}.RoundTrip(req)
		if res != nil {
			res.Body.Close()
		}
		return err
	}
	c := &Client{source: Source{http: true}}
	callErr := errors.New("the call ended without an answer")

	tr := &sendTrack{}
	ctx := context.WithValue(context.Background(), sendKey{}, tr)
	if err := post(ctx, live.URL); err != nil {
		t.Fatal(err)
	}
	if err := post(ctx, refused); err == nil {
		t.Fatal("a POST to a closed port connected")
	}
	if c.notSent(ctx, callErr, tr) {
		t.Fatal("a call whose POST was delivered counts as not sent because a later POST with its context could not connect")
	}

	// The call's own POST could not connect: nothing was sent.
	tr = &sendTrack{}
	ctx = context.WithValue(context.Background(), sendKey{}, tr)
	if err := post(ctx, refused); err == nil {
		t.Fatal("a POST to a closed port connected")
	}
	if !c.notSent(ctx, callErr, tr) {
		t.Fatal("a call whose only POST could not connect counts as sent")
	}
}
