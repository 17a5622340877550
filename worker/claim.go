package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/groupcommit"
)

// The claims of attempts (docs/protocol/41-tasks.md, docs/adr/0010): before
// a worker starts an attempt's body it creates the attempt's key in the KV
// bucket weft_claims, create-only. A delivery of a task whose claim exists
// never starts the body again, whatever the server's delivery count says —
// the count is consumer state the server writes lazily, and a server
// restart can deliver a task again as a first delivery.
const (
	// ClaimMaxAge is the bucket's max age: how long a claim lives at most
	// without being renewed. A worker renews the claim of a running body
	// every ClaimRenew; a claim of a body with a deadline lives until the
	// deadline plus ClaimMargin (after the deadline no worker starts the
	// body: rule 4 of the task protocol).
	ClaimMaxAge = 7 * 24 * time.Hour
	// ClaimMargin is how long a claim outlives its body's deadline, for
	// the clocks of the runner that set the deadline and of the worker that
	// checks it.
	ClaimMargin = 10 * time.Minute
	// ClaimRenew is how often a worker renews the claim of a body that is
	// still running.
	ClaimRenew = 24 * time.Hour
)

// ClaimsConfig is the configuration of weft_claims: file storage (a claim
// must survive a server restart), one value per key, ClaimMaxAge, and
// per-key TTLs (limit markers kept one minute).
func ClaimsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         api.ClaimsBucket,
		Description:    "Weft attempt claims: a key per started tool body, created before it starts",
		History:        1,
		TTL:            ClaimMaxAge,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: time.Minute,
	}
}

// claimsBucket returns weft_claims, creating it (with the task stream's
// replica count) if nobody provisioned it.
func claimsBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, api.ClaimsBucket)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	cfg := ClaimsConfig()
	if s, err := js.Stream(ctx, api.TaskStream); err == nil {
		cfg.Replicas = s.CachedInfo().Config.Replicas
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.KeyValue(ctx, api.ClaimsBucket)
	}
	return kv, err
}

// claimTTL is the TTL of t's claim taken at now: until its deadline plus
// ClaimMargin, 0 (the bucket's max age) without a deadline or when that is
// longer.
func claimTTL(t api.Task, now time.Time) time.Duration {
	if t.Deadline == nil {
		return 0
	}
	if d := t.Deadline.Sub(now) + ClaimMargin; d < ClaimMaxAge {
		return max(d, time.Second)
	}
	return 0
}

type claimResult int

const (
	// claimTaken: this delivery holds the claim; the body may start.
	claimTaken claimResult = iota
	// claimHeld: the attempt was claimed before (or closed, or released
	// as not started); its body never starts again.
	claimHeld
	// claimUnknown: the bucket could not tell; the body does not start.
	claimUnknown
)

// ownClaim is the claim this delivery holds: its key, value and revision.
type ownClaim struct {
	key string
	val api.Claim
	rev uint64
}

// takeClaim creates t's claim. On claimHeld it returns the claim found
// (its value decoded when it is an api.Claim). A create whose answer was lost is
// tried again: finding its own token, the delivery holds the claim.
// unstarted are the tokens of claims that deliveries of this task took (or
// may have taken) without starting its body (api.HeaderUnstartedClaim): a
// claim holding one of them is taken over, guarded by its revision, under
// this delivery's own token, so that a redelivery of this task after its
// body started finds a token it does not know.
func (w *Worker) takeClaim(t api.Task, key string, unstarted []string) (claimResult, ownClaim, api.Claim) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	own := ownClaim{key: key, val: api.Claim{Schema: api.Schema, Worker: w.id, Token: hex.EncodeToString(tok[:]), Claimed: time.Now().UTC()}}
	b, err := json.Marshal(own.val)
	if err != nil {
		return claimUnknown, own, api.Claim{}
	}
	back := backoff.New(50*time.Millisecond, 2*time.Second)
	// The tries go on while the worker stops (a create whose answer was
	// lost is found by its token, and a claim taken by a stopping worker
	// is released: cut short, it would stay and make the next delivery
	// report worker_lost for a body that never started), but not past
	// LateAfterAbandon after Abandon.
	if w.claimGroup != nil {
		if rev, ok := w.createGrouped(t, key, b); ok {
			own.rev = rev
			return claimTaken, own, api.Claim{}
		}
	}
	for range 6 {
		ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
		var opts []jetstream.KVCreateOpt
		if ttl := claimTTL(t, time.Now()); ttl > 0 {
			opts = append(opts, jetstream.KeyTTL(ttl))
		}
		own.rev, err = w.claims.Create(ctx, key, b, opts...)
		if errors.Is(err, jetstream.ErrKeyExists) {
			var e jetstream.KeyValueEntry
			e, err = w.claims.Get(ctx, key)
			if err == nil {
				found := decodeClaim(e.Value())
				if found.Token != "" && found.Token == own.val.Token {
					cancel()
					own.rev = e.Revision()
					return claimTaken, own, api.Claim{}
				}
				if found.Token == "" || found.NotStarted != nil || !slices.Contains(unstarted, found.Token) {
					cancel()
					return claimHeld, own, found
				}
				// A claim no body started under: taken over. An update
				// whose answer is lost is found by the token next try.
				own.rev, err = w.claims.Update(ctx, key, b, e.Revision())
			}
		}
		cancel()
		if err == nil {
			return claimTaken, own, api.Claim{}
		}
		w.log.Warn("worker: cannot claim the attempt", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "key", key, "err", err)
		if back.Wait(w.late) != nil {
			break
		}
	}
	return claimUnknown, own, api.Claim{}
}

// WithGroupCommit makes the worker send the creates of its claims that
// wait at the same time as one atomic batch of weft_claims when there are
// 16 or more (internal/groupcommit): under sync_interval: always one
// fsync for many claims
// (docs/adr/0032-fewer-writes-per-run.md). Each create keeps
// its own check (the key's last revision is 0: create-only); a batch
// refused whole is sent again message by message, and a create refused
// or unanswered is made again by KeyValue.Create, as without the option.
//
// The grouped create names the claim's subject as KeyValue.Create does
// with the default JetStream API prefix; a worker whose JetStream has
// another prefix or a domain (whose KV subjects carry it) does without
// grouping.
func WithGroupCommit() Option {
	return func(w *Worker) {
		if o := w.js.Options(); (o.APIPrefix != "" && o.APIPrefix != jetstream.DefaultAPIPrefix) || o.Domain != "" {
			return
		}
		w.claimGroup = groupcommit.New(w.js, nil).Publish
	}
}

// createGrouped is the first try of takeClaim's create with WithGroupCommit:
// the message KeyValue.Create sends for key with value b (its subject in
// weft_claims, an expected last subject sequence of 0, the claim's TTL),
// published through the worker's group-commit publisher. It reports whether the
// claim was created, and its revision; on false takeClaim goes on with
// its tries, which read the key (a create whose answer was lost is found
// by its token, a key whose last message is a removal marker is created
// at its revision).
func (w *Worker) createGrouped(t api.Task, key string, b []byte) (uint64, bool) {
	ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
	defer cancel()
	m := nats.NewMsg("$KV." + api.ClaimsBucket + "." + key)
	m.Data = b
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if ttl := claimTTL(t, time.Now()); ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	ack, err := w.claimGroup(ctx, m)
	if err != nil || ack == nil || ack.Duplicate {
		return 0, false
	}
	return ack.Sequence, true
}

// decodeClaim decodes a claim's value: an api.Claim, or — from a worker that
// stores something else, such as its id — an api.Claim whose Worker is that
// value (up to 64 printable bytes).
func decodeClaim(v []byte) api.Claim {
	var c api.Claim
	if json.Unmarshal(v, &c) == nil && c.Schema != 0 {
		return c
	}
	var b []byte
	for _, ch := range v {
		if ch >= 0x20 && ch < 0x7f && len(b) < 64 {
			b = append(b, ch)
		}
	}
	return api.Claim{Worker: string(b)}
}

// savedReport returns the report saved in the claim key, if any.
func (w *Worker) savedReport(key string) (api.Report, bool) {
	c, ok := w.claimAt(key)
	if !ok || c.Report == nil {
		return api.Report{}, false
	}
	return *c.Report, true
}

// claimAt reads the claim at key; false when it cannot be read or is
// absent.
func (w *Worker) claimAt(key string) (api.Claim, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := w.claims.Get(ctx, key)
	if err != nil {
		return api.Claim{}, false
	}
	return decodeClaim(e.Value()), true
}

// updateClaim writes own's value again (a renewal, or the saved report)
// if nobody changed the key since; it reports whether it did.
func (w *Worker) updateClaim(own *ownClaim) error {
	b, err := json.Marshal(own.val)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := w.claims.Update(ctx, own.key, b, own.rev)
	if err != nil {
		return fmt.Errorf("worker: claim %s: %w", own.key, err)
	}
	own.rev = rev
	return nil
}

// releaseClaim deletes own, the claim of t's attempt whose body this
// delivery took but never started, if nobody changed it since: the next
// delivery of the task takes it again and starts the body. If the delete
// fails the claim stays, and the next delivery reports the attempt
// worker_lost (its body may have run, as far as it can tell).
func (w *Worker) releaseClaim(t api.Task, own *ownClaim) {
	// After Abandon it is cut short with the other tries (w.late), so that
	// Run returns within LateAfterAbandon.
	ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
	defer cancel()
	if err := w.claims.Delete(ctx, own.key, jetstream.LastRevision(own.rev)); err != nil {
		w.log.Warn("worker: cannot release the claim of a body not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "key", own.key, "err", err)
	}
}

// markNotStarted replaces own, the claim of t's attempt that this delivery
// took and whose body it decided not to start, by the same claim saying so
// (api.Claim.NotStarted, why): an update at own's revision, so it changes
// only this delivery's own claim. The caller never starts the body after
// calling it, whatever the outcome: written, the runtime's close counts the
// attempt closed (it did not act) and no later delivery starts or takes it
// over; lost to another value (the key changed since) or unanswered, the
// claim counts as claimed, as before (docs/adr/0023-closing-attempts.md,
// "Claims released as not started"). It reports whether the value was
// written.
func (w *Worker) markNotStarted(t api.Task, own *ownClaim, why string) bool {
	val := own.val
	val.NotStarted = &api.ClaimNotStarted{Why: why, At: time.Now().UTC()}
	b, err := json.Marshal(val)
	if err != nil {
		return false
	}
	// After Abandon it is cut short with the other tries (w.late).
	ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
	rev, err := w.claims.Update(ctx, own.key, b, own.rev)
	cancel()
	// A revision conflict is ErrKeyRevisionMismatch (on any replication;
	// ErrKeyExists misses R>1 buckets, nats.go's jetstream docs).
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// Unanswered: the update may have landed; its value says. The
		// update's timeout has usually expired: the read gets its own.
		gctx, gcancel := context.WithTimeout(w.late, 5*time.Second)
		if e, gerr := w.claims.Get(gctx, own.key); gerr == nil {
			if c := decodeClaim(e.Value()); c.Token == val.Token && c.NotStarted != nil {
				rev, err = e.Revision(), nil
			}
		}
		gcancel()
	}
	if err != nil {
		w.log.Warn("worker: cannot mark the claim of a body not started; it counts as claimed", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "key", own.key, "why", why, "err", err)
		return false
	}
	own.val, own.rev = val, rev
	return true
}

// reportNotStarted tells t's run that the claim of its attempt is marked
// not started (why): a lost report with cause not_started
// (docs/protocol/41-tasks.md). It records nothing by itself: the runner
// reads the claim and, when a decision read the claim before the mark
// (the action is uncertain), records what the claim says
// (docs/adr/0023-closing-attempts.md, "Late evidence: a mark after the
// decision"). rep is the delivery's report (its identity fields);
// delivered as any report (deliver), never saved in the claim.
func (w *Worker) reportNotStarted(t api.Task, rep api.Report, why string) {
	rep.Outcome, rep.Cause = api.OutcomeLost, api.CauseNotStarted
	rep.Evidence = fmt.Sprintf("the claim of attempt %d was marked not started (%s): its body never started and never will", t.Attempt, why)
	w.deliver(t, rep, nil)
}
