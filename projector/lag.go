package projector

import (
	"fmt"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections"
)

// Lag says how the view v lags its run's log whose head h was read after v:
// "the stored view is at version 7 and the log at 9 (the projector is
// catching up)", or "" when v holds every event of the log up to h. The
// run query answers at the log's head (docs/protocol/50-queries.md), but the
// stored views, lists and inboxes follow the log eventually; a reader that
// shows them (the console's run page, weft show) says so when they are
// behind, so that nobody takes a request a list shows as still open after
// it was answered (docs/semantics.md §4).
func Lag(v projections.RunView, h eventlog.Head) string {
	if v.Version >= h.Version {
		return ""
	}
	return fmt.Sprintf("the stored view is at version %d and the log at %d (the projector is catching up)", v.Version, h.Version)
}
