package projector

import "github.com/weftrun/weft/projections"

// IndexKeys returns the keys of the weft_index entries that the stored
// view v accounts for: its run-list entry, its inbox items' entries and,
// for a restarted run, its entry in its parent's forks (docs/protocol/50-queries.md,
// "Order indexes"). `weft retention apply` (package retention) purges them
// when it removes a finished run. The directory nodes are not among them:
// a node that leads to no entry costs a reader one read, while a node
// removed behind a running projector's back (it caches the nodes it put)
// would hide the entries it puts later under it.
func IndexKeys(v projections.RunView) []string {
	var out []string
	for _, e := range entries(derivedOf(v)) {
		out = append(out, e.key)
	}
	return out
}
