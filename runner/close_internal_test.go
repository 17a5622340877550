package runner

import (
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/worker"
)

// TestSemantics8_ClosingAnAttemptOnlyWhileItsClaimLives
// (docs/adr/0023-closing-attempts.md, "A claim that may have expired is not
// closed"): a worker's claim, taken after the fence, lives until the
// fence's deadline plus worker.ClaimMargin and at least worker.ClaimMaxAge
// after the fence; a close is made only before the earlier of the two
// less half the margin. Before, an attempt without a deadline was always
// closable: a close 8 days after its fence would win over a worker's
// claim that expired, over a body that ran.
func TestSemantics8_ClosingAnAttemptOnlyWhileItsClaimLives(t *testing.T) {
	t.Parallel()
	fenced := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	soon := fenced.Add(time.Minute)
	far := fenced.Add(30 * 24 * time.Hour)
	cases := []struct {
		name     string
		deadline *time.Time
		at       time.Duration // after the fence
		want     bool
	}{
		{"no deadline, within the bucket's max age", nil, worker.ClaimMaxAge - worker.ClaimMargin, true},
		{"no deadline, within half the margin of the max age", nil, worker.ClaimMaxAge - worker.ClaimMargin/2, false},
		{"no deadline, 8 days after the fence", nil, 8 * 24 * time.Hour, false},
		{"deadline, before it plus half the margin", &soon, time.Minute + worker.ClaimMargin/2 - time.Second, true},
		{"deadline, after it plus half the margin", &soon, time.Minute + worker.ClaimMargin/2, false},
		{"deadline past the max age, within the max age", &far, worker.ClaimMaxAge - worker.ClaimMargin, true},
		{"deadline past the max age, 8 days after the fence", &far, 8 * 24 * time.Hour, false},
	}
	for _, c := range cases {
		a := aggregate.Action{FencedAt: fenced, Attempts: 1, Attempt: events.AttemptFenced{Attempt: 1, Incarnation: 1, Deadline: c.deadline}}
		if got := closable(a, fenced.Add(c.at)); got != c.want {
			t.Errorf("%s: closable = %v, want %v", c.name, got, c.want)
		}
	}
}
