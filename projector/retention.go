package projector

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/projections"
)

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

// ReadCheckpoint reads the projector's checkpoint from its bucket (zero
// when none): every message of the log up to Seq has its view and index
// entries stored. Retention removes only runs whose log's head the
// checkpoint covers, so that no write of the projector's for them is
// still to come.
func ReadCheckpoint(ctx context.Context, js jetstream.JetStream) (Checkpoint, error) {
	kv, err := js.KeyValue(ctx, BucketState)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("projector: bucket %s: %w", BucketState, err)
	}
	return readCheckpoint(ctx, kv)
}
