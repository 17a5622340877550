package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
)

// docs/semantics.md §5 rule 1, docs/adr/0010-attempt-claims.md and
// docs/adr/0032-fewer-writes-per-run.md: with WithGroupCommit a claim's
// create is still create-only and durable. Of 32 deliveries claiming at
// once (in batches when 16 or more wait), each takes its own attempt's
// claim at the revision stored, and the one whose key another delivery
// holds finds that claim and takes nothing. A claim released (its key's
// last message a removal marker, which the grouped create's check
// refuses) is taken again by the next delivery, through KeyValue.Create's
// handling of the marker.
func TestSemantics5_GroupedClaimsStayCreateOnly(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(provision.KV(ClaimsConfig()).WithAtomicPublish()),
		natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := New(s.Conn, s.JS, WithGroupCommit())
	claims, err := claimsBucket(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	w.claims = claims
	deadline := time.Now().Add(time.Hour)
	task := func(i int) Task {
		return Task{Run: fmt.Sprintf("r%d", i), Action: "a", Attempt: 1, Incarnation: 1, Deadline: &deadline}
	}
	held := ClaimKey("r0", "a", 1, 1)
	res0, own0, _ := w.takeClaim(task(0), held, nil)
	if res0 != claimTaken {
		t.Fatalf("the first claim: %v", res0)
	}

	const n = 32
	type out struct {
		res   claimResult
		own   ownClaim
		found Claim
	}
	outs := make([]out, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := ClaimKey(task(i).Run, "a", 1, 1)
			outs[i].res, outs[i].own, outs[i].found = w.takeClaim(task(i), key, nil)
		}()
	}
	wg.Wait()
	if outs[0].res != claimHeld || outs[0].found.Token != own0.val.Token {
		t.Fatalf("a delivery of a held attempt: %v, found %+v; want held by token %s", outs[0].res, outs[0].found, own0.val.Token)
	}
	for i, o := range outs[1:] {
		if o.res != claimTaken {
			t.Fatalf("delivery %d: %v, want its claim taken despite another key's refusal", i+1, o.res)
		}
		e, err := claims.Get(ctx, o.own.key)
		if err != nil || e.Revision() != o.own.rev || decodeClaim(e.Value()).Token != o.own.val.Token {
			t.Fatalf("claim %s: %v %v, want revision %d with its own token", o.own.key, e, err, o.own.rev)
		}
	}

	// Released, then claimed again by the next delivery.
	w.releaseClaim(task(0), &own0)
	res, own, _ := w.takeClaim(task(0), held, nil)
	e, err := claims.Get(ctx, held)
	if res != claimTaken || err != nil || e.Revision() != own.rev || decodeClaim(e.Value()).Token != own.val.Token {
		t.Fatalf("a released claim taken again: %v, key %v %v", res, e, err)
	}
}
