// Package anyapi is an API that uses any where a type parameter fits, and
// also where it is fine.
package anyapi

// Handler takes any.
type Handler func(in any) (any, error)

// Box holds any.
type Box struct {
	// Value is untyped.
	Value   interface{}
	private any
}

// Policy has a method taking a map of any.
type Policy interface {
	// Check checks.
	Check(args map[string]any) error
}

// Run runs.
func Run(h Handler, v any) {}

// Typed is fine: any is only a constraint.
func Typed[In, Out any](f func(In) (Out, error)) {}

// Generic is fine too.
type Generic[T any] struct {
	// V is typed.
	V T
}

// Get is fine.
func (g Generic[T]) Get() T { return g.V }

func internal(v any) {}
