package roles_test

import (
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/weftrun/weft/protocol"
)

// docs/security.md (the runner's grant to delete weft_drivers messages)
// and docs/adr/0036-driver-entry-removed-by-sequence.md: a runner whose
// credentials were issued before that grant still removes a finished
// run's driver entry. The server refuses its message delete as a
// permission violation, which no request answers: the delete waits only
// deleteWait and falls back to a purge, within the removal's own
// context. Before, the delete waited out that context and the entry was
// left, on every run's end.
func TestARunnerWithoutTheDeleteGrantStillRemovesDriverEntries(t *testing.T) {
	del := "$JS.API.STREAM.MSG.DELETE.KV_" + protocol.DriversBucket
	d := deployWith(t, func(uc *jwt.UserClaims) {
		if !uc.Pub.Allow.Contains(del) {
			t.Fatalf("the runner's grant has no %s", del)
		}
		uc.Pub.Allow.Remove(del)
	})
	finishRun(t, d, "pay-8")
	ctx := ctxT(t)
	kv, err := d.node.JetStream().KeyValue(ctx, protocol.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-8's driver entry removed", func() (bool, bool) {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return true, n == 0
	})
	// The removal tried the delete first, and the server refused it.
	d.v.expect(t, del)
}
