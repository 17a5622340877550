package runner

import "github.com/weftrun/weft/internal/clock"

// WithOwnershipClock makes partition ownership read c instead of the wall
// clock (liveness, the runners view, the partition loop, releases): a
// clock.Fake lets a test move ownership's time by hand.
func WithOwnershipClock(c clock.Clock) Option { return func(r *Runner) { r.clk = c } }
