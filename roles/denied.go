package roles

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
)

// hintOrder is the roles Allowing names, a person's first: a legal hold is
// the custodian's to place, though the runner's grant writes the holds too
// (it serves weft.api.hold). Not the worker: its grant is its own queue's,
// never a person's credentials.
var hintOrder = []Role{Operator, Reader, Custodian, Runner, Projector}

// Allowing returns the roles whose grant (Permissions) allows publishing
// to subject, a person's roles first (operator, reader, custodian), the
// services' after them (runner, projector); never the worker, whose grant
// is one tool queue's. None for a subject no role may publish to.
func Allowing(subject string) []Role {
	var allow []Role
	for _, r := range hintOrder {
		g, err := Permissions(r, api.Queue{})
		if err != nil {
			continue
		}
		for _, p := range g.Publish {
			if subjectMatch(p, subject) {
				allow = append(allow, r)
				break
			}
		}
	}
	return allow
}

// The endings Explain gives a permission_denied message: the roles that
// may, or none.
const (
	hintRoles  = " may (weft roles show ROLE)"
	hintNobody = "no role of `weft roles` may publish to it"
)

// Explain adds to a permission_denied error (docs/protocol.md) that names
// the subject the NATS server refused a publish to ("… permission to
// publish to SUBJECT") which roles' credentials allow it (Allowing), so
// that whoever sent it knows which credentials to ask for: "…; the
// credentials of role operator may (weft roles show ROLE)". The code and
// the reason (and every other field) are kept; only the message grows.
// It returns a copy of the *weft.Error with the longer message, not
// whatever wrapped it: a wrapper around a permission_denied (fmt.Errorf's
// %w) is not kept, so callers explain the error as the server answered it. Package client gives every
// answer through it, so the CLI, the console and the MCP servers say the
// same. Any other error, a permission_denied that names no published
// subject (a refused reply inbox) and one already explained are returned
// as they are.
func Explain(err error) error {
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodePermissionDenied {
		return err
	}
	if strings.Contains(we.Message, hintRoles) || strings.Contains(we.Message, hintNobody) {
		return err
	}
	subject := deniedSubject(we.Message)
	if subject == "" {
		return err
	}
	hint := hintNobody
	if allow := Allowing(subject); len(allow) > 0 {
		names := make([]string, len(allow))
		for i, r := range allow {
			names[i] = string(r)
		}
		hint = "the credentials of role " + strings.Join(names, " or ") + hintRoles
	}
	cp := *we
	cp.Message = fmt.Sprintf("%s; %s", we.Message, hint)
	return &cp
}

// deniedSubject is the subject a permission_denied message names after
// "permission to publish to ".
func deniedSubject(msg string) string {
	const pub = "permission to publish to "
	i := strings.Index(msg, pub)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(pub):]
	if j := strings.IndexAny(rest, " ;("); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// subjectMatch reports whether subject matches the NATS subject pattern
// (tokens, * for one token, > for the rest).
func subjectMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, t := range p {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}
