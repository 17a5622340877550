package runner

import (
	"testing"
	"time"
)

// SEMANTICS §9: a settlement waits for a running body until the attempt's
// recorded deadline plus grace, and without a deadline (Infinity) never
// stops on its own (the request's context bounds it).
func TestScenario27_BodyWaitBoundIsTheAttemptDeadline(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl := at.Add(200 * time.Millisecond)
	for _, c := range []struct {
		deadline *time.Time
		now      time.Time
		over     bool
	}{
		{nil, at.Add(24 * time.Hour), false},
		{&dl, at, false},
		{&dl, dl.Add(time.Second), false},
		{&dl, dl.Add(time.Second + time.Millisecond), true},
		{&dl, at.Add(11 * time.Second), true},
	} {
		if got := bodyWaitOver(c.deadline, time.Second, c.now); got != c.over {
			t.Errorf("bodyWaitOver(%v, 1s, %v) = %v, want %v", c.deadline, c.now, got, c.over)
		}
	}
}
