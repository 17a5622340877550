package projector

import (
	"fmt"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections"
)

// Lag says how the view v lags its run's log whose head h was read after v:
// "the view is at version 7 and the log at 9 (the projector is catching
// up)", or "" when v holds every event of the log up to h. The read model
// follows the log eventually; a reader that shows a view (the console's run
// page, weft show) says so when it is behind, so that nobody takes a
// request it lists as still open after it was answered (docs/semantics.md §4).
func Lag(v projections.RunView, h eventlog.Head) string {
	if v.Version >= h.Version {
		return ""
	}
	return fmt.Sprintf("the view is at version %d and the log at %d (the projector is catching up)", v.Version, h.Version)
}
