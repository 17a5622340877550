package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/roles"
	"github.com/weftrun/weft/worker"
)

// deniedHint adds to a permission_denied answer which roles' credentials
// allow the subject it names (roles.Permissions), so that the person who
// ran the command knows which credentials to ask for. Any other error is
// returned as it is.
func deniedHint(err error) error {
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodePermissionDenied {
		return err
	}
	subject := deniedSubject(we.Message)
	if subject == "" {
		return err
	}
	var allow []string
	for _, r := range roles.All() {
		var q worker.Queue
		if r == roles.Worker {
			continue // a worker's grant is its own queue's: never a person's credentials
		}
		g, gerr := roles.Permissions(r, q)
		if gerr != nil {
			continue
		}
		for _, p := range g.Publish {
			if subjectMatch(p, subject) {
				allow = append(allow, string(r))
				break
			}
		}
	}
	hint := "no role of `weft roles` may publish to it"
	if len(allow) > 0 {
		hint = "the credentials of role " + strings.Join(allow, " or ") + " may (weft roles show ROLE)"
	}
	return &weft.Error{Code: we.Code, Reason: we.Reason, Message: fmt.Sprintf("%s; %s", we.Message, hint)}
}

// deniedSubject is the subject an api.Request permission_denied message
// names: its last word.
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
