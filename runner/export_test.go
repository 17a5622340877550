package runner

// WithoutScan stops the runner from scanning weft_drivers for runs to take
// over, so that a test decides which command takes a run over.
func WithoutScan() Option { return func(r *Runner) { r.noScan = true } }

// InMemory reports how many runs r holds in memory and how many it
// evicted while they were idle.
func (r *Runner) InMemory() (held, idle int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs), r.idle.len()
}
