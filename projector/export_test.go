package projector

// WithoutIndex makes a projector keep no order index (weft_index): the
// projector as it was before the indexes, for the benchmark's baseline.
func WithoutIndex() Option { return func(p *Projector) { p.noIndex = true } }
