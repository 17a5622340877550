package api_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
)

// TestReplyErrorReadsTheOneEnvelope (docs/protocol.md, "Error codes"): an
// error reply's body {"schema":1,"error":{…}} is its weft.Error; a reply
// whose Nats-Service-Error headers mark an error without such a body is
// the header's code; a success reply is no error.
func TestReplyErrorReadsTheOneEnvelope(t *testing.T) {
	body := &nats.Msg{Header: nats.Header{}, Data: []byte(`{"schema":1,"error":{"code":"already_started","message":"run pay-7 exists","same_input":true}}`)}
	body.Header.Set("Nats-Service-Error", "already_started")
	body.Header.Set("Nats-Service-Error-Code", "409")
	if e := api.ReplyError(body); e == nil || e.Code != weft.CodeAlreadyStarted || e.SameInput == nil || !*e.SameInput || e.Message != "run pay-7 exists" {
		t.Errorf("ReplyError(body) = %#v, want already_started with same_input and its message", e)
	}
	headerOnly := &nats.Msg{Header: nats.Header{}, Data: []byte("not json")}
	headerOnly.Header.Set("Nats-Service-Error", "unavailable")
	headerOnly.Header.Set("Nats-Service-Error-Code", "503")
	if e := api.ReplyError(headerOnly); e == nil || e.Code != weft.CodeUnavailable {
		t.Errorf("ReplyError(header only) = %#v, want unavailable", e)
	}
	for _, data := range []string{`{"schema":1,"run":"pay-7","status":"running"}`, `{"schema":1,"error":null}`} {
		if e := api.ReplyError(&nats.Msg{Data: []byte(data)}); e != nil {
			t.Errorf("ReplyError(%s) = %#v, want nil", data, e)
		}
	}
}
