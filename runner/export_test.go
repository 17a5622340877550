package runner

// WithoutScan stops the runner from scanning weft_drivers for runs to take
// over, so that a test decides which command takes a run over.
func WithoutScan() Option { return func(r *Runner) { r.noScan = true } }
