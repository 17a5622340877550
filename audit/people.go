package audit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// WithPeople names the keys (nkey user public keys, "U…") the auditor
// trusts as people's — the runners' person keys, an approver's keys — each
// with the names the deployment records for it ("": any name; a key may
// have several honest names, an approver's config and the runners' person
// keys naming it differently). With it, even with no key, Verify requires
// every person's command recorded verified (an answer with its approval
// proof; a reconcile, resolve, cancel, pause or resume with its command
// proof) to be signed by one of keys, recorded under one of its names
// ("untrusted" otherwise: a stranger's key, or a name edited). Without it
// the people's keys are not checked (Report.PeopleChecked false). With
// WithTrust, such a command signed by a runner's head key the auditor
// trusts, and not named a person's, is "untrusted" with or without
// WithPeople: a runner's key vouches for its log, not for a person. A
// command recorded unverified (a typed name) claims no key: it is
// reported unverified, not refused. WithPeople may be given several times:
// the names add up.
func WithPeople(keys map[string][]string) Option {
	return func(c *config) {
		if c.people == nil {
			c.people = map[string][]string{}
		}
		for k, names := range keys {
			c.people[k] = append(c.people[k], names...)
		}
	}
}

// checkPerson is the check WithPeople and WithTrust add to the verified
// person's command d recorded by env; pc, the re-check of its proof, is
// marked Trusted when its key is a person's the auditor names.
func checkPerson(c config, env events.Envelope, d projections.Deed, pc *ProofCheck) *Problem {
	why, trusted := personProblem(c, d.What, d.Who)
	if why != "" {
		return problem(KindUntrusted, env, "event %d: %s", env.Version, why)
	}
	if pc != nil && trusted {
		pc.Trusted = true
	}
	return nil
}

// personProblem says why who, recorded verified for the person's command
// what, is not vouched for by a person's key the auditor names ("" when it
// is, or who is not verified); trusted reports whether the key is one.
func personProblem(c config, what string, who projections.PersonView) (why string, trusted bool) {
	if !who.Verified {
		return "", false
	}
	key := who.Key
	names, person := c.people[key]
	switch {
	case !person && c.trust[key]:
		return fmt.Sprintf("the %s %s is signed by %s, a runner's head key you trust, not a person's key: a runner's key vouches for its log, not for a person",
			what, who.Describe(), key), false
	case !person && c.people != nil:
		return fmt.Sprintf("the %s %s is signed by %s, a key you do not name as a person's: it is a stranger's, or name it (a `person KEY NAME` line of the trust file, or --people with the runners' person keys file)",
			what, who.Describe(), key), false
	case person && !slices.Contains(names, "") && !slices.Contains(names, who.By):
		return fmt.Sprintf("the %s is recorded by %q, but you name key %s %s: the name was edited, or the deployment names the key otherwise (name it so too)",
			what, who.By, key, quoteNames(names)), false
	}
	return "", person
}

// quoteNames is names quoted, joined with "or".
func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, " or ")
}
