package worker

// Stopping reports whether w stopped taking tasks (tests only).
func (w *Worker) Stopping() bool { return w.stopping.Load() }
