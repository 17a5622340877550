package runner

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/telemetry"
)

// transient reports whether err says that something could not be done or
// recorded now (the store or NATS did not answer, writers contended, the
// run was busy) rather than a decision's refusal: the work stays pending.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var conflict *eventlog.ConflictError
	if errors.As(err, &conflict) {
		return true
	}
	var we *weft.Error
	if !errors.As(err, &we) {
		return true
	}
	// settle_unconfirmed is no answer the runner's own work meets; an
	// append of unknown outcome (decideAppend) leaves the work pending:
	// the run is read again before it is derived again.
	return we.Code.Retryable() || we.Code == weft.CodeOutcomeUnknown
}

// refresh re-reads rn's tail after an append whose outcome was unknown
// (rn.stale), so that act derives its work from what the log holds. It
// reports whether rn is current and still driven by this runner.
func (r *Runner) refresh(ctx context.Context, rn *run) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tail, head, err := r.evlog.LoadAfter(rctx, rn.id, rn.head)
	if err != nil {
		return false
	}
	recs, err := recorded(tail)
	if err != nil {
		return false
	}
	landed := make([]events.Event, 0, len(recs))
	for _, rec := range recs {
		if r.evolveRead(rn, rec, head) != nil {
			return false // quarantined (evolveRead dropped rn)
		}
		landed = append(landed, rec.Event)
	}
	rn.head, rn.stale = head, false
	if !rn.state.Exists() {
		// A start whose append's outcome was unknown: it did not land.
		r.drop(rn)
		r.deleteDriver(rn.id, 0)
		return false
	}
	if rn.state.Runner() != r.id {
		r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
		r.drop(rn)
		return false
	}
	r.observe(ctx, rn, landed)
	return true
}

// deleteDriver deletes run's weft_drivers key: only at revision rev when
// rev is not 0, else only while it names this runner.
func (r *Runner) deleteDriver(run string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rev == 0 {
		e, err := r.drivers.Get(ctx, r.driverKey(run))
		if err != nil || string(e.Value()) != r.id {
			return
		}
		rev = e.Revision()
	}
	if err := r.removeDriverKey(ctx, run, rev); err != nil {
		r.log.Debug("driver key delete", "run", run, "err", err)
	}
}

// correctDriver makes run's weft_drivers key name the driver the log
// records (s), or removes it for a run that does not exist or is
// finished — except a finished run whose end head is owed (owesHead): its
// entry is left as it is, for the owner of its partition, whose wake
// signs the end and removes it (wakeLocked; a finished run's entry is
// never read for its driver). Its only caller is a start that lost a
// conflict; that exception is covered by reasoning, not by a test.
func (r *Runner) correctDriver(run string, s aggregate.State) {
	_, fin := s.Finished()
	if fin && r.owesHead(s) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if fin || !s.Exists() {
		err = r.removeDriverKey(ctx, run, 0)
	} else {
		_, err = r.drivers.Put(ctx, r.driverKey(run), []byte(s.Runner()))
	}
	if err != nil {
		r.log.Warn("driver key", "run", run, "err", err)
	}
}
