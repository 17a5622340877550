package a

type T struct{}

func (t *T) Method() {}

type G[P any] struct{}

func (g G[P]) Generic() {}

func Top() {}
