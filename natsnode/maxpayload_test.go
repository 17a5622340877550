package natsnode_test

import (
	"testing"

	"github.com/weftrun/weft/natsnode"
)

// TestEmbeddedMaxPayload: the embedded server accepts messages of up to
// natsnode.MaxPayload, enough for a tool result of the default max result
// bytes (1 MiB, docs/semantics.md §2) plus its envelope; the NATS default of 1
// MiB
// is not.
func TestEmbeddedMaxPayload(t *testing.T) {
	ctx := ctxT(t)
	n, err := natsnode.Start(ctx, natsnode.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if got := n.Conn().MaxPayload(); got != natsnode.MaxPayload {
		t.Fatalf("embedded max payload %d, want %d", got, natsnode.MaxPayload)
	}
	if natsnode.MaxPayload < 2<<20 {
		t.Fatalf("MaxPayload %d does not hold a 1 MiB result plus envelope", natsnode.MaxPayload)
	}
}
