package worker

import (
	"context"
	"fmt"
	"github.com/weftrun/weft/api"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/groupcommit"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
)

// docs/semantics.md §5 ("A worker then takes the attempt's claim before it
// starts the body"), docs/adr/0010-attempt-claims.md and
// docs/adr/0032-fewer-writes-per-run.md: with group commit a claim's
// create is still create-only and durable, whatever becomes of its batch.
// The worker's publisher sends each round's n creates as one atomic batch
// (SetTest holds the flush until n wait):
//   - a batch with the create of a key another delivery holds is refused
//     whole, and its creates are sent again one by one: that delivery
//     finds the other's claim and takes nothing, the others take theirs;
//   - a batch stored whose acknowledgement is lost: each create sent again
//     is refused (the key exists), and each delivery finds the claim by its
//     own token, taken once, at the revision stored;
//   - claims released (each key's last message a removal marker, which the
//     grouped create's check refuses) are taken again, through
//     KeyValue.Create's handling of the marker.
func TestSemantics5_GroupedClaimsStayCreateOnly(t *testing.T) {
	const n = 8
	s := natstest.Start(t, natstest.WithAssets(provision.KV(ClaimsConfig()).WithAtomicPublish()),
		natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := New(s.Conn, s.JS)
	claims, err := claimsBucket(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	w.claims = claims
	stream, err := s.JS.Stream(ctx, "KV_"+api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	deadline := time.Now().Add(time.Hour)
	task := func(run string) api.Task {
		return api.Task{Run: run, Action: "a", Attempt: 1, Incarnation: 1, Deadline: &deadline}
	}
	type out struct {
		res   claimResult
		own   ownClaim
		found api.Claim
	}
	// round takes the claims of runs at once through a publisher that
	// sends them as one batch, losing the first loseAcks acknowledgements.
	round := func(runs []string, loseAcks int) ([]out, groupcommit.Stats) {
		t.Helper()
		p := groupcommit.New(s.JS, nil)
		p.SetTest(len(runs), loseAcks)
		w.claimGroup = p.Publish
		st0 := groupcommit.Read()
		outs := make([]out, len(runs))
		var wg sync.WaitGroup
		for i, run := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i].res, outs[i].own, outs[i].found = w.takeClaim(task(run), api.ClaimKey(run, "a", 1, 1), nil)
			}()
		}
		wg.Wait()
		st1 := groupcommit.Read()
		return outs, groupcommit.Stats{Batches: st1.Batches - st0.Batches, Batched: st1.Batched - st0.Batched, Retried: st1.Retried - st0.Retried}
	}
	takenAsStored := func(what string, i int, o out) {
		t.Helper()
		if o.res != claimTaken {
			t.Fatalf("%s, delivery %d: %v, want its claim taken", what, i, o.res)
		}
		e, err := claims.Get(ctx, o.own.key)
		if err != nil || e.Revision() != o.own.rev || decodeClaim(e.Value()).Token != o.own.val.Token {
			t.Fatalf("%s, claim %s: %v %v, want revision %d with its own token", what, o.own.key, e, err, o.own.rev)
		}
	}
	runs := func(r string) []string {
		var rs []string
		for i := range n {
			rs = append(rs, fmt.Sprintf("%s-%d", r, i))
		}
		return rs
	}

	// A held key in the batch.
	w.claimGroup = nil
	res0, own0, _ := w.takeClaim(task("held-0"), api.ClaimKey("held-0", "a", 1, 1), nil)
	if res0 != claimTaken {
		t.Fatalf("the first claim: %v", res0)
	}
	outs, st := round(runs("held"), 0)
	if st.Batches != 0 || st.Retried != n {
		t.Fatalf("a batch with a held key: %+v, want it refused whole and its %d creates sent again", st, n)
	}
	if outs[0].res != claimHeld || outs[0].found.Token != own0.val.Token {
		t.Fatalf("a delivery of a held attempt: %v, found %+v; want held by token %s", outs[0].res, outs[0].found, own0.val.Token)
	}
	for i, o := range outs[1:] {
		takenAsStored("beside a held key", i+1, o)
	}

	// A batch stored, its acknowledgement lost.
	before := lastSeq()
	outs, st = round(runs("lost"), 1)
	if st.Batches != 0 || st.Retried != n {
		t.Fatalf("a batch whose acknowledgement is lost: %+v, want its %d creates sent again", st, n)
	}
	for i, o := range outs {
		takenAsStored("after a lost acknowledgement", i, o)
	}
	if after := lastSeq(); after-before != n {
		t.Fatalf("after a lost acknowledgement weft_claims went from %d to %d, want each claim stored once (%d)", before, after, n)
	}

	// Released, then taken again.
	for _, o := range outs {
		w.releaseClaim(task("lost"), &o.own)
	}
	outs, st = round(runs("lost"), 0)
	if st.Batches != 0 || st.Retried != n {
		t.Fatalf("a batch of released keys: %+v, want it refused whole and its %d creates sent again", st, n)
	}
	for i, o := range outs {
		takenAsStored("a released claim", i, o)
	}
}

// docs/adr/0032-fewer-writes-per-run.md: the grouped create names the
// claim's subject as KeyValue.Create does with the default API prefix, so
// a worker whose JetStream has a domain (its KV subjects carry it) does
// without grouping.
func TestAWorkerWithAJetStreamDomainDoesNotGroupItsClaims(t *testing.T) {
	s := natstest.Start(t)
	if New(s.Conn, s.JS, WithGroupCommit()).claimGroup == nil {
		t.Fatal("the default JetStream: no grouping")
	}
	js, err := jetstream.NewWithDomain(s.Conn, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if New(s.Conn, js, WithGroupCommit()).claimGroup != nil {
		t.Fatal("a JetStream with a domain: the claims grouped on the default prefix's subject")
	}
}
