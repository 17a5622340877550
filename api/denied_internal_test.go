package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/natstest"
)

// TestAnInboxRefusedAfterThePublishIsNotPermissionDenied (docs/semantics.md
// safety rule 1; docs/protocol.md, permission_denied says nothing reached
// Weft): when the server refuses a request's reply inbox only after the
// request was published (its user's permissions narrowed since the
// connection's inbox was judged allowed), the request may be carried out:
// denied answers outcome_unknown, never permission_denied. The server's
// refusal is the error nats.go makes of it. On the old code it was
// permission_denied.
func TestAnInboxRefusedAfterThePublishIsNotPermissionDenied(t *testing.T) {
	s := natstest.Start(t)
	nc := s.Connect()
	inbox := "_INBOX.ok.abc"
	last := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `permissions violation for subscription to "`+inbox+`"`)
	if err := denied(nc, last, nil, "weft.api.start", inbox); !errors.Is(err, &weft.Error{Code: weft.CodeOutcomeUnknown}) {
		t.Errorf("the inbox %s refused after the publish of a request: %v, want outcome_unknown", inbox, err)
	}
	last = fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `permissions violation for publish to "weft.api.start"`)
	if err := denied(nc, last, nil, "weft.api.start", inbox); !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) {
		t.Errorf("a refused publish: %v, want permission_denied", err)
	}
}

// TestAnotherSubscriptionRefusedUnderThePrefixLeavesTheRequestWaiting
// (docs/protocol.md, outcome_unknown is the answer of a request whose reply
// cannot come): the refusal of another subscription under the request's
// inbox prefix — a JetStream call's <prefix>.<id>.*, which permissions of
// _INBOX.* refuse while they allow the request's own <prefix>.<id>, or
// another request's inbox — does not stop the request's own reply:
// denied answers nothing and the request waits for it. On the old code any
// refusal under the prefix answered outcome_unknown at once.
func TestAnotherSubscriptionRefusedUnderThePrefixLeavesTheRequestWaiting(t *testing.T) {
	s := natstest.Start(t)
	nc := s.Connect()
	inbox := "_INBOX.ok.abc"
	for _, refused := range []string{"_INBOX.ok.def.*", "_INBOX.ok.another"} {
		last := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `permissions violation for subscription to "`+refused+`"`)
		if err := denied(nc, last, nil, "weft.api.start", inbox); err != nil {
			t.Errorf("%s refused during a request whose inbox is %s: %v, want no answer (the request waits for its reply)", refused, inbox, err)
		}
	}
}
