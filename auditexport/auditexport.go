// Package auditexport reads from a deployment what one run's
// self-verifying export holds: its events, its void records (`weft repair
// drop`) and its legal holds, or why the holds could not be read (Read).
// `weft audit export` of one run and of a range, and the console's
// "Download history", all write what Read returns (Run.Write, which is
// audit.ExportRun), so the files they give an auditor are the same and
// verify the same. Package audit writes and checks the file; it does not
// read a deployment (it would import retention, whose tests import it).
package auditexport

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/retention"
)

// HoldsWait bounds the read of a run's legal holds: past it the export
// says they are unread (holds_unread) rather than wait.
const HoldsWait = time.Second

// Run is what one run's export holds, as audit.ExportRun writes it.
type Run struct {
	// Events is the run's history as stored; none when the run has no
	// events (unknown, or removed while it was read).
	Events []events.Envelope
	// Voids are the run's void records, oldest first.
	Voids []eventlog.VoidRecord
	// Holds are every legal hold weft_holds keeps for the run, active
	// and released, in the order placed.
	Holds []audit.Hold
	// HoldsUnread says why the holds could not be read (a refusal of
	// the caller's credentials, a timeout); "" when they were. The
	// export then carries a holds_unread line, never "no hold".
	HoldsUnread string
}

// Write writes r as one run of an export (audit.ExportRun).
func (r Run) Write(w io.Writer) error {
	return audit.ExportRun(w, r.Events, r.Voids, r.Holds, r.HoldsUnread)
}

// Manifest is r's entry in a range's manifest (audit.ManifestOf); r has
// events.
func (r Run) Manifest() audit.ManifestRun {
	return audit.ManifestOf(r.Events, r.Voids, r.Holds, r.HoldsUnread)
}

// Option configures Read.
type Option func(*config)

type config struct {
	violations *api.Violations
	afterRead  func(step string) error
}

// WithViolations makes a refusal of the holds' bucket, watched on v (the
// connection's api.WatchViolations), end the holds' read at once rather
// than at HoldsWait; its holds_unread then says permission_denied.
func WithViolations(v *api.Violations) Option {
	return func(c *config) { c.violations = v }
}

// AfterRead calls fn after Read read the run's events ("events") and
// after it read its void records ("voids"); an error from fn ends Read
// with it. A caller that must act between the reads uses it (a test of
// a purge or a crash in the middle of an export).
func AfterRead(fn func(step string) error) Option {
	return func(c *config) { c.afterRead = fn }
}

// Read reads run's export from the deployment js reaches, as of one
// moment: its events as one load of its log reads them, its void records
// up to that load's last message (a record appended after it voids a
// message beyond the events read, and is left out), then its legal holds
// (StoredHolds). A run that goes on appending meanwhile is exported as it
// was loaded, never read again nor refused. A purge (retention) may
// remove the run while it is read (its events and void records go in one
// purge, the last step of a removal): the log's head, read after both,
// gone means a Run without events, never the events without their void
// records. A run without events has no holds read. An error is the log's
// (the holds' is HoldsUnread).
func Read(ctx context.Context, js jetstream.JetStream, run string, opts ...Option) (Run, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	envs, voids, err := readWhole(ctx, eventlog.New(js), run, c.afterRead)
	if err != nil || len(envs) == 0 {
		return Run{}, err
	}
	r := Run{Events: envs, Voids: voids}
	if r.Holds, err = StoredHolds(ctx, js, run, c.violations); err != nil {
		r.HoldsUnread = err.Error()
	}
	return r, nil
}

func readWhole(ctx context.Context, log *eventlog.Log, run string, after func(string) error) ([]events.Envelope, []eventlog.VoidRecord, error) {
	// lh.Seq is the last message the load read, a trailing void record
	// included (eventlog's fold).
	envs, lh, err := log.Load(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	if after != nil {
		if err := after("events"); err != nil {
			return nil, nil, err
		}
	}
	all, err := log.Voids(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	if after != nil {
		if err := after("voids"); err != nil {
			return nil, nil, err
		}
	}
	h, err := log.Head(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	if h.IsZero() || len(envs) == 0 {
		return nil, nil, nil
	}
	var voids []eventlog.VoidRecord
	for _, v := range all {
		if v.At <= lh.Seq {
			voids = append(voids, v)
		}
	}
	return envs, voids, nil
}

// StoredHolds is retention.HoldsOf (every hold of run, active and
// released, in the order placed) within HoldsWait: a refusal of the
// holds' bucket watched on v (unless nil) answers at once, as the
// permission_denied *weft.Error the server's refusal made, instead of at
// the deadline.
func StoredHolds(ctx context.Context, js jetstream.JetStream, run string, v *api.Violations) ([]retention.Hold, error) {
	ctx, cancel := context.WithTimeout(ctx, HoldsWait)
	defer cancel()
	if v != nil {
		var stop context.CancelFunc
		ctx, stop = v.Watch(ctx, func(_, subject string) bool { return HoldsSubject(subject) })
		defer stop()
	}
	hs, err := retention.HoldsOf(ctx, js, run)
	if err != nil {
		if denied := api.DeniedBy(ctx); denied != nil {
			return nil, denied
		}
		return nil, err
	}
	return hs, nil
}

// HoldsSubject reports whether subject is one a call on the legal holds'
// bucket publishes to (its stream KV_weft_holds, its keys
// $KV.weft_holds.…).
func HoldsSubject(subject string) bool {
	return strings.Contains(subject, ".KV_"+retention.HoldsBucket) || strings.HasPrefix(subject, "$KV."+retention.HoldsBucket+".")
}
