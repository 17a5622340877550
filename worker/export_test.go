package worker

import (
	"time"

	"github.com/weftrun/weft/api"
)

// Stopping reports whether w stopped taking tasks (tests only).
func (w *Worker) Stopping() bool { return w.stopping.Load() }

// Joined is how many deliveries of a task whose body this worker was
// running waited for it instead of starting or reporting (tests only).
func (w *Worker) Joined() int64 { return w.joined.Load() }

// SetRetry sets the backoff between report tries (tests only).
func (w *Worker) SetRetry(base, ceiling time.Duration) { w.retryBase, w.retryCap = base, ceiling }

// StopsSeen is how many stop messages (weft.stop.<run>) w received
// (tests only).
func (w *Worker) StopsSeen() int64 { return w.stops.Load() }

// SetAfterClaim makes w call f once a delivery holds its attempt's claim,
// before its check after the claim and its body (tests only).
func (w *Worker) SetAfterClaim(f func(api.Task)) { w.afterClaim = f }

// Rebinds is how many queue consumes ended while Run ran and were made again.
func (w *Worker) Rebinds() int64 { return w.rebinds.Load() }
