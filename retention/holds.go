// Package retention removes finished runs older than an age from every
// store of a deployment (Apply), and keeps the legal holds that exempt a
// run and its family from it (Place, Release, Holds): docs/security.md,
// "Retention and legal hold", and docs/adr/0030-retention-and-legal-hold.md.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/provision"
)

// HoldsBucket holds the legal holds under the run id (Hold).
const HoldsBucket = protocol.HoldsBucket

// PurgesBucket holds a key per run whose purge started and has not
// completed (its value: when it started); Apply completes them first.
const PurgesBucket = protocol.PurgesBucket

// holdHistory is how many values of a run's hold the bucket keeps: each
// placement and release is a value, so who held and released a run, and
// why, outlives the current one.
const holdHistory = 64

// Assets are the buckets of retention: the holds' first (holdsBucket).
func Assets() []provision.Asset {
	return []provision.Asset{
		provision.KV(jetstream.KeyValueConfig{Bucket: HoldsBucket, Description: "Weft legal holds by run: who placed or released each, why and when", History: holdHistory, Storage: jetstream.FileStorage}),
		provision.KV(jetstream.KeyValueConfig{Bucket: PurgesBucket, Description: "Weft runs whose purge started and has not completed", Storage: jetstream.FileStorage}),
	}
}

// Hold is a legal hold on a run, as weft_holds keeps it (audit.Hold: the
// one type, so that what an export carries and audit checks is what the
// bucket keeps, field for field).
type Hold = audit.Hold

// Release is who released a hold (audit.HoldRelease).
type Release = audit.HoldRelease

// Person is who places or releases a hold: By, the name recorded, and
// whether the deployment vouched for it (Identity, with the command proof
// it checked), as approvers.People.Command answers it; the caller checks
// the proof (the runner).
type Person = approvers.Who

// runHolds is the value of a run's key in HoldsBucket: its holds, and
// whether a purge passed its hold check on it. Holds and purges decide on
// this one key by compare-and-set (its revision), so of a hold and a purge
// that race exactly one wins and the other knows it
// (docs/adr/0030-retention-and-legal-hold.md §5).
type runHolds struct {
	Run   string `json:"run"`
	Holds []Hold `json:"holds"`
	// Purging is when a purge found no active hold and took the run: a
	// hold placed after it is refused.
	Purging *time.Time `json:"purging,omitempty"`
}

// active returns v's first active hold (the zero Hold when none).
func (v runHolds) active() Hold { return ActiveOf(v.Holds) }

// ActiveOf returns the first active hold of holds (a run's, in the order
// placed, as HoldsOf returns them), or the zero Hold when none is active.
func ActiveOf(holds []Hold) Hold {
	for _, h := range holds {
		if h.Active() {
			return h
		}
	}
	return Hold{}
}

// checkProofUnused refuses the signed command proof p when v keeps it
// already, on a hold's placement or release (proof_refused, reason
// proof_used): a command proof is consumed once (docs/security.md, "Who
// did it"), so a proof seen once cannot place a second hold, or release a
// hold placed later, in its signer's name. nil for no proof.
func (v runHolds) checkProofUnused(p *events.CommandProof) error {
	if p == nil {
		return nil
	}
	d := proof.CommandDigest(*p)
	same := func(q *events.CommandProof) bool { return q != nil && q.Key == p.Key && proof.CommandDigest(*q) == d }
	for _, h := range v.Holds {
		what := ""
		switch {
		case same(h.Proof):
			what = "the placement of"
		case h.Released != nil && same(h.Released.Proof):
			what = "the release of"
		default:
			continue
		}
		return &weft.Error{Code: weft.CodeProofRefused, Reason: proof.ReasonProofUsed,
			Message: fmt.Sprintf("run %s: this command proof was already recorded with %s its legal hold %s: a proof is consumed once", v.Run, what, h.ID)}
	}
	return nil
}

// decodeHolds decodes a run's value; an earlier release's value is one
// Hold, taken as its hold h1.
func decodeHolds(run string, b []byte) (runHolds, error) {
	var v runHolds
	if err := json.Unmarshal(b, &v); err != nil {
		return runHolds{}, fmt.Errorf("retention: the holds of %s do not decode: %w", run, err)
	}
	if v.Holds == nil && v.Purging == nil {
		var h Hold
		if err := json.Unmarshal(b, &h); err == nil && h.Run != "" {
			if h.ID == "" {
				h.ID = "h1"
			}
			v = runHolds{Run: h.Run, Holds: []Hold{h}}
		}
	}
	v.Run = run
	return v, nil
}

// readHolds reads run's value and its revision (0: no key).
func readHolds(ctx context.Context, kv jetstream.KeyValue, run string) (runHolds, uint64, error) {
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return runHolds{Run: run}, 0, nil
	}
	if err != nil {
		return runHolds{}, 0, fmt.Errorf("retention: read the holds of %s: %w", run, err)
	}
	v, err := decodeHolds(run, e.Value())
	return v, e.Revision(), err
}

// errLost is a compare-and-set of a run's holds that another writer
// beat: read again and decide again.
var errLost = errors.New("retention: the holds changed")

// writeHolds writes v at revision rev (0: the key must not exist);
// errLost when the key changed since.
func writeHolds(ctx context.Context, kv jetstream.KeyValue, v runHolds, rev uint64) error {
	b, _ := json.Marshal(v)
	var err error
	if rev == 0 {
		_, err = kv.Create(ctx, v.Run, b)
	} else {
		_, err = kv.Update(ctx, v.Run, b, rev)
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return errLost
	}
	return fmt.Errorf("retention: write the holds of %s: %w", v.Run, err)
}

// updateHolds applies change to run's holds and writes them by
// compare-and-set, again while another writer beats it. change returns
// false to write nothing.
func updateHolds(ctx context.Context, kv jetstream.KeyValue, run string, change func(*runHolds) (bool, error)) error {
	for {
		v, rev, err := readHolds(ctx, kv, run)
		if err != nil {
			return err
		}
		write, err := change(&v)
		if err != nil || !write {
			return err
		}
		if err := writeHolds(ctx, kv, v, rev); !errors.Is(err, errLost) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Place puts a legal hold on run, by whom (by.By: the name recorded,
// with whether the deployment vouched for it) and why (both required), at at,
// beside the holds it has. The run must have events (unknown_run
// otherwise). A run a purge took (it found no active hold) is refused
// with conflict, and the hold is not placed: the purge has passed its hold
// check, and the run goes. commandID, when not empty, is recorded in the
// hold, and a Place with a command id that placed one of run's holds
// answers that hold and adds none: a retry is safe for as long as the
// hold is kept, not only while its command's reply is. Another command
// with a command proof (by.Proof) that one of run's holds or releases
// keeps already is refused proof_refused (proof_used).
func Place(ctx context.Context, js jetstream.JetStream, commandID, run string, by Person, reason string, at time.Time) (Hold, error) {
	if err := checkWho(run, by.By, reason); err != nil {
		return Hold{}, err
	}
	head, err := eventlog.New(js).Head(ctx, run)
	if err != nil {
		return Hold{}, err
	}
	if head.IsZero() {
		return Hold{}, weft.UnknownRun(run)
	}
	holds, err := holdsBucket(ctx, js)
	if err != nil {
		return Hold{}, err
	}
	var h Hold
	err = updateHolds(ctx, holds, run, func(v *runHolds) (bool, error) {
		if i := slices.IndexFunc(v.Holds, madeBy(commandID, false)); i >= 0 {
			h = v.Holds[i]
			return false, nil
		}
		if err := v.checkProofUnused(by.Proof); err != nil {
			return false, err
		}
		if v.Purging != nil {
			return false, weft.Errorf(weft.CodeConflict, "run %s: a purge passed its hold check on it at %s: the hold is not placed, and the run goes with its family (docs/adr/0030-retention-and-legal-hold.md)", run, v.Purging.UTC().Format(time.RFC3339))
		}
		h = Hold{Run: run, ID: fmt.Sprintf("h%d", len(v.Holds)+1), By: by.By, Identity: by.Identity, Proof: by.Proof, Reason: reason, At: at.UTC(), CommandID: commandID}
		v.Holds = append(v.Holds, h)
		return true, nil
	})
	if err != nil {
		return Hold{}, holdsErr(err)
	}
	return h, nil
}

// ReleaseHold releases run's hold id, by whom and why; the placement and
// the release stay in the bucket's history. id may be empty when the run
// has one active hold. A run without that active hold is refused with
// unknown_run; an empty id when the run has several, invalid_request.
// commandID, when not empty, is recorded in the release, and a
// ReleaseHold with a command id that released one of run's holds answers
// that hold, released, and changes nothing. A command proof kept already
// is refused as for Place.
func ReleaseHold(ctx context.Context, js jetstream.JetStream, commandID, run, id string, by Person, reason string, at time.Time) (Hold, error) {
	if err := checkWho(run, by.By, reason); err != nil {
		return Hold{}, err
	}
	holds, err := holdsBucket(ctx, js)
	if err != nil {
		return Hold{}, err
	}
	var h Hold
	err = updateHolds(ctx, holds, run, func(v *runHolds) (bool, error) {
		if i := slices.IndexFunc(v.Holds, madeBy(commandID, true)); i >= 0 {
			h = v.Holds[i]
			return false, nil
		}
		if err := v.checkProofUnused(by.Proof); err != nil {
			return false, err
		}
		var ids []string
		i := -1
		for j, x := range v.Holds {
			if x.Active() {
				ids = append(ids, x.ID)
				if x.ID == id || id == "" {
					i = j
				}
			}
		}
		switch {
		case id == "" && len(ids) > 1:
			return false, weft.Errorf(weft.CodeInvalidRequest, "run %s has %d active legal holds (%s): name the one to release", run, len(ids), strings.Join(ids, ", "))
		case i < 0:
			return false, weft.Errorf(weft.CodeUnknownRun, "run %s has no active legal hold %s", run, id)
		}
		v.Holds[i].Released = &Release{By: by.By, Identity: by.Identity, Proof: by.Proof, Reason: reason, At: at.UTC(), CommandID: commandID}
		h = v.Holds[i]
		return true, nil
	})
	if err != nil {
		return Hold{}, holdsErr(err)
	}
	return h, nil
}

// holdsErr keeps a coded refusal and makes any other failure unavailable.
func holdsErr(err error) error {
	var we *weft.Error
	if errors.As(err, &we) {
		return err
	}
	return unavailable("%v", err)
}

// Holds returns every hold recorded (active and released), by run id and
// hold id. A deployment without the bucket has none.
func Holds(ctx context.Context, js jetstream.JetStream) ([]Hold, error) {
	kv, err := js.KeyValue(ctx, HoldsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("bucket %s: %v", HoldsBucket, err)
	}
	var out []Hold
	err = eachValue(ctx, kv, func(run string, b []byte) error {
		v, err := decodeHolds(run, b)
		out = append(out, v.Holds...)
		return err
	})
	slices.SortStableFunc(out, func(a, b Hold) int { return strings.Compare(a.Run, b.Run) })
	return out, err
}

// ByCommand returns run's hold that the command commandID placed
// (release false) or released (release true), and whether there is one:
// Place and ReleaseHold answer a retry of that command with it, and a
// caller that checks who sent the command answers it first, so that a
// retry whose proof has since expired still learns what its command did.
func ByCommand(ctx context.Context, js jetstream.JetStream, run, commandID string, release bool) (Hold, bool, error) {
	if commandID == "" {
		return Hold{}, false, nil
	}
	hs, err := HoldsOf(ctx, js, run)
	if err != nil {
		return Hold{}, false, unavailable("%v", err)
	}
	if i := slices.IndexFunc(hs, madeBy(commandID, release)); i >= 0 {
		return hs[i], true, nil
	}
	return Hold{}, false, nil
}

// madeBy matches the hold that the command commandID placed (release
// false) or released (release true); no hold for an empty command id.
func madeBy(commandID string, release bool) func(Hold) bool {
	return func(h Hold) bool {
		if commandID == "" {
			return false
		}
		if release {
			return h.Released != nil && h.Released.CommandID == commandID
		}
		return h.CommandID == commandID
	}
}

// HoldsOf returns every hold of run (active and released), in the order
// placed; none when the run has none or the bucket does not exist. Its
// errors wrap the client's (a permission violation, a timeout).
func HoldsOf(ctx context.Context, js jetstream.JetStream, run string) ([]Hold, error) {
	kv, err := js.KeyValue(ctx, HoldsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("retention: bucket %s: %w", HoldsBucket, err)
	}
	v, _, err := readHolds(ctx, kv, run)
	return v.Holds, err
}

// HoldOf returns run's first active hold (the zero Hold when it has
// none). Its errors wrap the client's (a permission violation, a
// timeout).
func HoldOf(ctx context.Context, js jetstream.JetStream, run string) (Hold, error) {
	hs, err := HoldsOf(ctx, js, run)
	return runHolds{Run: run, Holds: hs}.active(), err
}

// takeForPurge is a purge's hold check of run: by compare-and-set on the
// run's holds, it either finds an active hold (returned; nothing written)
// or marks the run purging, after which no hold is placed on it.
func takeForPurge(ctx context.Context, kv jetstream.KeyValue, run string, at time.Time) (Hold, error) {
	var held Hold
	err := updateHolds(ctx, kv, run, func(v *runHolds) (bool, error) {
		if held = v.active(); held.Active() {
			return false, nil
		}
		if v.Purging != nil {
			return false, nil
		}
		v.Purging = &at
		return true, nil
	})
	if err != nil {
		return Hold{}, unavailable("%v", err)
	}
	return held, nil
}

// giveBack undoes takeForPurge: holds may be placed on run again.
func giveBack(ctx context.Context, kv jetstream.KeyValue, run string) error {
	err := updateHolds(ctx, kv, run, func(v *runHolds) (bool, error) {
		if v.Purging == nil {
			return false, nil
		}
		v.Purging = nil
		return true, nil
	})
	if err != nil {
		return unavailable("%v", err)
	}
	return nil
}

func checkWho(run, by, reason string) error {
	if err := eventlog.CheckRun(run); err != nil {
		return err
	}
	if strings.TrimSpace(by) == "" || strings.TrimSpace(reason) == "" {
		return weft.Errorf(weft.CodeInvalidRequest, "run %s: a hold and its release name who (by) and why (reason)", run)
	}
	return nil
}

// holdsBucket provisions and opens the holds' bucket only: placing and
// releasing a hold needs no other (a runner serving weft.api.hold may not
// provision weft_purges, docs/security.md).
func holdsBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if err := provision.EnsureOnly(ctx, js, Assets()[:1]); err != nil {
		return nil, unavailable("%v", err)
	}
	kv, err := js.KeyValue(ctx, HoldsBucket)
	if err != nil {
		return nil, unavailable("bucket %s: %v", HoldsBucket, err)
	}
	return kv, nil
}

func buckets(ctx context.Context, js jetstream.JetStream) (holds, purges jetstream.KeyValue, err error) {
	if err := provision.EnsureOnly(ctx, js, Assets()); err != nil {
		return nil, nil, unavailable("%v", err)
	}
	if holds, err = js.KeyValue(ctx, HoldsBucket); err != nil {
		return nil, nil, unavailable("bucket %s: %v", HoldsBucket, err)
	}
	if purges, err = js.KeyValue(ctx, PurgesBucket); err != nil {
		return nil, nil, unavailable("bucket %s: %v", PurgesBucket, err)
	}
	return holds, purges, nil
}

// eachValue calls fn with every key's last value of kv (deleted keys
// skipped), in one watch.
func eachValue(ctx context.Context, kv jetstream.KeyValue, fn func(key string, value []byte) error) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return unavailable("watch %s: %v", kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return unavailable("watch %s: closed", kv.Bucket())
			}
			if e == nil {
				return nil
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}

func unavailable(format string, args ...any) error {
	return weft.Errorf(weft.CodeUnavailable, "retention: "+format, args...)
}
