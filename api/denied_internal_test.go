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
	for _, refused := range []string{inbox, "_INBOX.ok.another"} {
		last := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `permissions violation for subscription to "`+refused+`"`)
		err := denied(nc, last, nil, "weft.api.start", inbox)
		if !errors.Is(err, &weft.Error{Code: weft.CodeOutcomeUnknown}) {
			t.Errorf("the inbox %s refused after the publish of a request to %s: %v, want outcome_unknown", refused, inbox, err)
		}
	}
	last := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `permissions violation for publish to "weft.api.start"`)
	if err := denied(nc, last, nil, "weft.api.start", inbox); !errors.Is(err, &weft.Error{Code: weft.CodePermissionDenied}) {
		t.Errorf("a refused publish: %v, want permission_denied", err)
	}
}
