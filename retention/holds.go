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
	"github.com/weftrun/weft/eventlog"
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

// Assets are the buckets of retention.
func Assets() []provision.Asset {
	return []provision.Asset{
		provision.KV(jetstream.KeyValueConfig{Bucket: HoldsBucket, Description: "Weft legal holds by run: who placed or released each, why and when", History: holdHistory, Storage: jetstream.FileStorage}),
		provision.KV(jetstream.KeyValueConfig{Bucket: PurgesBucket, Description: "Weft runs whose purge started and has not completed", Storage: jetstream.FileStorage}),
	}
}

// Hold is a legal hold on a run: while it is not released, retention
// removes neither the run nor any run of its family. It is kept in
// HoldsBucket, not in the run's log: a finished run's log is closed by its
// signed end head (docs/semantics.md §1), and a hold says nothing about
// what the run did.
type Hold struct {
	Run    string    `json:"run"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Released is set once the hold was released: by whom, why and when.
	Released *Release `json:"released,omitempty"`
}

// Release is who released a hold, why and when.
type Release struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Active reports whether the hold still exempts its run.
func (h Hold) Active() bool { return h.Run != "" && h.Released == nil }

// Place puts a legal hold on run, by whom and why (both required), at at.
// The run must have events (unknown_run otherwise). A run whose purge has
// started is refused with conflict: the hold is written first and the
// purge marker read after it, and a purge writes its marker first and
// reads the holds after it, so of a hold and a purge that race one always
// sees the other.
func Place(ctx context.Context, js jetstream.JetStream, run, by, reason string, at time.Time) (Hold, error) {
	if err := checkWho(run, by, reason); err != nil {
		return Hold{}, err
	}
	head, err := eventlog.New(js).Head(ctx, run)
	if err != nil {
		return Hold{}, err
	}
	if head.IsZero() {
		return Hold{}, weft.UnknownRun(run)
	}
	holds, purges, err := buckets(ctx, js)
	if err != nil {
		return Hold{}, err
	}
	h := Hold{Run: run, By: by, Reason: reason, At: at.UTC()}
	b, _ := json.Marshal(h)
	if _, err := holds.Put(ctx, run, b); err != nil {
		return Hold{}, unavailable("put the hold of %s: %v", run, err)
	}
	if _, err := purges.Get(ctx, run); err == nil {
		return h, weft.Errorf(weft.CodeConflict, "run %s: a purge of it is under way: the hold is recorded, and the purge keeps the run only if it reads the holds after this one (a purge completing an interrupted removal does not): see whether the run is still there (weft show) before relying on the hold", run)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return h, unavailable("read the purge marker of %s: %v", run, err)
	}
	return h, nil
}

// ReleaseHold releases run's hold, by whom and why; the placement and the
// release stay in the bucket's history. A run without an active hold is
// refused with unknown_run.
func ReleaseHold(ctx context.Context, js jetstream.JetStream, run, by, reason string, at time.Time) (Hold, error) {
	if err := checkWho(run, by, reason); err != nil {
		return Hold{}, err
	}
	holds, _, err := buckets(ctx, js)
	if err != nil {
		return Hold{}, err
	}
	e, err := holds.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Hold{}, weft.Errorf(weft.CodeUnknownRun, "run %s has no legal hold", run)
	}
	if err != nil {
		return Hold{}, unavailable("read the hold of %s: %v", run, err)
	}
	var h Hold
	if err := json.Unmarshal(e.Value(), &h); err != nil || !h.Active() {
		return Hold{}, weft.Errorf(weft.CodeUnknownRun, "run %s has no active legal hold", run)
	}
	h.Released = &Release{By: by, Reason: reason, At: at.UTC()}
	b, _ := json.Marshal(h)
	if _, err := holds.Update(ctx, run, b, e.Revision()); err != nil {
		return Hold{}, weft.Errorf(weft.CodeConflict, "run %s: its hold changed while it was released: %v", run, err)
	}
	return h, nil
}

// Holds returns every hold recorded (active and released), by run id. A
// deployment without the bucket has none.
func Holds(ctx context.Context, js jetstream.JetStream) ([]Hold, error) {
	kv, err := js.KeyValue(ctx, HoldsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("bucket %s: %v", HoldsBucket, err)
	}
	var out []Hold
	err = eachValue(ctx, kv, func(_ string, b []byte) error {
		var h Hold
		if err := json.Unmarshal(b, &h); err != nil {
			return fmt.Errorf("retention: a hold in %s does not decode: %w", HoldsBucket, err)
		}
		out = append(out, h)
		return nil
	})
	slices.SortFunc(out, func(a, b Hold) int { return strings.Compare(a.Run, b.Run) })
	return out, err
}

// HoldOf returns run's hold (the zero Hold when it has none). Its errors
// wrap the client's (a permission violation, a timeout).
func HoldOf(ctx context.Context, js jetstream.JetStream, run string) (Hold, error) {
	kv, err := js.KeyValue(ctx, HoldsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return Hold{}, nil
	}
	if err != nil {
		return Hold{}, fmt.Errorf("retention: bucket %s: %w", HoldsBucket, err)
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Hold{}, nil
	}
	if err != nil {
		return Hold{}, fmt.Errorf("retention: read the hold of %s: %w", run, err)
	}
	var h Hold
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Hold{}, fmt.Errorf("retention: the hold of %s does not decode: %w", run, err)
	}
	return h, nil
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
