package e2e_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/weftrun/weft"
)

// TestChaosJudgesOnlyAnswers: the chaos check "a well-formed command is
// never the runtime's inconsistency" (docs/semantics.md §8, "A run can
// always be answered") judges what the runtime answered. A cancel that got
// no answer within the caller's deadline — its runner was SIGKILLed — is
// not an answered internal (CI: "c1-6: cancel answered internal (api:
// cancel: context deadline exceeded)"); an answered internal still is.
func TestChaosJudgesOnlyAnswers(t *testing.T) {
	c := &chaosEnv{t: t}
	c.notTheCallersFault("cancel", "r1", fmt.Errorf("api: cancel: %w", context.DeadlineExceeded))
	if len(c.problems) != 0 {
		t.Fatalf("a command without an answer was judged: %v", c.problems)
	}
	c.notTheCallersFault("cancel", "r1", &weft.Error{Code: weft.CodeInternal, Message: "x"})
	if len(c.problems) != 1 {
		t.Fatalf("an answered internal was not judged: %v", c.problems)
	}
	if !c.accepted("r1", fmt.Errorf("api: approve: %w", context.DeadlineExceeded), nil) {
		t.Fatal("a command without an answer is sent again on the next round, not refused")
	}
}
