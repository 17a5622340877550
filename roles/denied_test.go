package roles_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/roles"
)

// TestAllowingNamesTheRolesWhoseGrantPublishes (docs/security.md, the
// roles): the command endpoints are the operator's, the holds the
// custodian's, the queries every person's role's; the log the
// runner's only; a subject of no grant nobody's.
func TestAllowingNamesTheRolesWhoseGrantPublishes(t *testing.T) {
	for subject, want := range map[string][]roles.Role{
		"weft.api.approve":    {roles.Operator},
		"weft.api.start":      {roles.Operator},
		"weft.api.cancel":     {roles.Operator},
		"weft.api.hold":       {roles.Custodian},
		"weft.api.query.run":  {roles.Operator, roles.Reader, roles.Custodian},
		"weft.ev.pay-7.x":     {roles.Runner},
		"weft.nothing.at.all": nil,
	} {
		if got := roles.Allowing(subject); !slices.Equal(got, want) {
			t.Errorf("Allowing(%s) = %v, want %v", subject, got, want)
		}
	}
}

// TestExplainAddsTheRolesOnce: a permission_denied naming a published
// subject gains the roles that may publish to it, keeping its code,
// reason and every other field (a copy: the error given is not changed);
// explained again it is unchanged; another error, or a refused
// inbox (no published subject), is returned as it is.
func TestExplainAddsTheRolesOnce(t *testing.T) {
	const msg = "the NATS server refused this connection's user permission to publish to weft.api.approve"
	same := true
	denied := &weft.Error{Code: weft.CodePermissionDenied, Reason: "r", Message: msg, SameInput: &same, Actions: []string{"2/call_2_1"}}
	err := roles.Explain(denied)
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodePermissionDenied || we.Reason != "r" ||
		!strings.HasSuffix(we.Message, "publish to weft.api.approve; the credentials of role operator may (weft roles show ROLE)") {
		t.Fatalf("explained: %v", err)
	}
	if we.SameInput != &same || len(we.Actions) != 1 || we.Actions[0] != "2/call_2_1" {
		t.Errorf("explained %+v: want same_input and actions kept", we)
	}
	if denied.Message != msg {
		t.Errorf("the error given was changed: %q", denied.Message)
	}
	if again := roles.Explain(err); again.Error() != err.Error() {
		t.Errorf("explained twice: %v", again)
	}
	nobody := roles.Explain(&weft.Error{Code: weft.CodePermissionDenied, Message: "… permission to publish to weft.nowhere (so: x)"})
	if !strings.HasSuffix(nobody.Error(), "; no role of `weft roles` may publish to it") {
		t.Errorf("a subject no role publishes to: %v", nobody)
	}
	for _, e := range []error{nil, weft.Errorf(weft.CodeUnavailable, "permission to publish to weft.api.approve"),
		&weft.Error{Code: weft.CodePermissionDenied, Message: "permission to subscribe to its reply inbox _INBOX.x"}} {
		if got := roles.Explain(e); got != e {
			t.Errorf("Explain(%v) = %v, want it unchanged", e, got)
		}
	}
}
