package runner

import (
	"context"
	"sync"
	"time"
)

// ModelMessages is modelMessages, for tests: the transcript as the model
// port reads it.
var ModelMessages = modelMessages

// EndsFinished is endsFinished, for tests.
var EndsFinished = endsFinished

// WithoutSeal makes a runner with a head key append each signed head after
// the decision it signs, as the release before docs/adr/0044 did, instead of
// sealing the decision with it: so that a test can make it die between the
// two, and prove that the runner after it signs what it left.
func WithoutSeal() Option { return func(r *Runner) { r.unsealed = true } }

// WithoutScan stops the runner from scanning weft_drivers for runs to take
// over, so that a test decides which command takes a run over.
func WithoutScan() Option { return func(r *Runner) { r.noScan = true } }

// WithHook calls f at the named points of an acquisition ("acquire-owned":
// run's partition is owned, the run not yet installed) and of a
// partition's release ("release-acquiring": waiting for acquisitions in
// flight; "release-locking": the hand-off is about to wait for run's
// lock, holding the locks of the partition's runs before it in id order
// (handOffJudged); "release-retry": a run could not be handed off, tried again;
// "release-deleted": the partition's key is deleted), at the end of a
// drain's hand-over, once the keys of the partitions with no run held
// are deleted ("drain-released"), at the end of
// every round of rebalancing ("partition-pass"), at the end of every scan
// beside the partition loop ("partition-scanned"), when the runners view
// is delivered a runner's key (run: its id) or is ready again ("")
// ("runners-view", from the ownership package), when the stream copy of
// a task the runner's worker took was not acknowledged ("copy-unacknowledged")
// and once its republish is arranged ("copy-lost"), before a model reply's
// append that carries its resolution is sent ("resolution-appending"), once a drain told its
// in-process worker to stop ("worker-stopped"), before a drain deletes
// the key of a partition with nothing running ("release-quiet"), when a rebuild of the
// driver index from the log starts ("rebuild"), loads a run ("rebuild-read") and
// creates a run's entry ("rebuild-entry"), when a start's first
// events are appended, before they are acted on ("start-appended"), and
// when an append's outcome is unknown, before the run is read again
// ("append-unknown"), so that a test orders or counts them.
func WithHook(f func(event string, p int, run string)) Option {
	return func(r *Runner) { r.hook = f }
}

// WithHandOffLockTimeout bounds a hand-off's wait for a run's lock.
func WithHandOffLockTimeout(d time.Duration) Option { return func(r *Runner) { r.handOffLock = d } }

// Holds reports whether r holds run in memory.
func Holds(r *Runner, run string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.runs[run]
	return ok
}

// HoldRun takes run's lock (the run must be in memory), as a command being
// applied would, until the returned func is called.
func HoldRun(r *Runner, run string) (unlock func(), ok bool) {
	r.mu.Lock()
	rn, held := r.runs[run]
	r.mu.Unlock()
	if !held {
		return nil, false
	}
	if rn.lock(context.Background()) != nil {
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(rn.unlock) }, true
}

// RunLocked reports whether run's lock is held (by a command being
// applied, or a release's hand-off), without waiting for it: false when
// the run is not in memory.
func RunLocked(r *Runner, run string) bool {
	r.mu.Lock()
	rn, held := r.runs[run]
	r.mu.Unlock()
	if !held {
		return false
	}
	select {
	case rn.sem <- struct{}{}:
		rn.unlock()
		return false
	default:
		return true
	}
}

// StaleView makes this runner's table of the partitions' owners say
// again that it owns partition p at revision rev (its claim), as the
// table of a runner paused (SIGSTOP) or cut off while another claimed the
// partition says: its watcher has not seen the claim yet.
func (r *Runner) StaleView(p int, rev uint64) {
	r.own.Assume(p, rev)
}

// ForgetReconnectCheck makes the next acquisition verify the owned
// partitions as after a reconnection (acquiring).
func (r *Runner) ForgetReconnectCheck() {
	r.own.ForgetReconnectCheck()
}

// HandedOff is how many tasks the runner handed to its in-process worker
// (handtask.go), for tests.
func (r *Runner) HandedOff() int64 {
	if w := r.inproc.Load(); w != nil {
		return w.HandedOff()
	}
	return 0
}

// WorkerHolds reports whether r's in-process worker holds the attempt of
// claim key (worker.Worker.Holds): a task of it handed there, or a
// delivery of its stream copy, is being checked, claimed, run or
// reported. A handed task lets go of it after its report or mark was
// answered, or once it found the claim closed or taken, and only then
// publishes its stream copy when it needs one (docs/adr/0039), for tests.
func (r *Runner) WorkerHolds(key string) bool {
	if w := r.inproc.Load(); w != nil {
		held, _ := w.Holds(key)
		return held
	}
	return false
}

// HandedFallbacks is how many handed tasks of r's in-process worker ended
// without their report answered and published their stream copy
// (worker.Worker.HandedFallbacks; counted before the publish), for tests.
func (r *Runner) HandedFallbacks() int64 {
	if w := r.inproc.Load(); w != nil {
		return w.HandedFallbacks()
	}
	return 0
}

// RemoveDriverKey is removeDriverKey, for tests.
func RemoveDriverKey(ctx context.Context, r *Runner, run string, rev uint64) error {
	return r.removeDriverKey(ctx, run, rev)
}

// ErrDriverKeyChanged is errDriverKeyChanged, for tests.
var ErrDriverKeyChanged = errDriverKeyChanged
