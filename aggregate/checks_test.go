package aggregate_test

import (
	"testing"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
)

// docs/semantics.md §4: PolicyOutcome reads a decision's kind as package
// policy names it; every kind of policy is the decision recorded for it
// (a renamed constant on either side would record an allow as an error).
func TestSemantics4_PolicyKindsAreTheRecordedDecisions(t *testing.T) {
	for kind, recorded := range map[policy.Kind]string{
		policy.KindAllow:           events.PolicyAllow,
		policy.KindDeny:            events.PolicyDeny,
		policy.KindRequireApproval: events.PolicyRequireApproval,
	} {
		if string(kind) != recorded {
			t.Errorf("policy kind %q is recorded as %q", kind, recorded)
		}
	}
}
