package chaos

import (
	"errors"
	"testing"
)

// A miss of the projection bound (checkProjectionBehind) names each run
// behind with its log's and its stored view's versions, or says that no
// view is stored or that it cannot be read.
func TestProjectionBehindNamesEachRunWithItsVersions(t *testing.T) {
	for _, c := range []struct {
		lag  lag
		want string
	}{
		{lag{run: "s3-0004", view: 7, head: 9}, "s3-0004 (log at 9, view at 7)"},
		{lag{run: "s3-0008", head: 4}, "s3-0008 (log at 4, no view)"},
		{lag{run: "s3-0011", head: 2, err: errors.New("bad json")}, "s3-0011 (log at 2, view unreadable: bad json)"},
	} {
		if got := c.lag.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.lag, got, c.want)
		}
	}
}
