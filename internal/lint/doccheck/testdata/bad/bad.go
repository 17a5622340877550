// Bad is a package whose documentation breaks every rule once.
package bad

// Grouped constants.
const (
	// A is documented.
	A = 1
	B = 2
)

// Good is documented but does not end its sentence
func Good() {}

func Undocumented() {}

// Does something, but the doc does not start with the name.
func Wrong() {}

// Fine is fine.
type Fine struct{}

// Method is documented.
func (Fine) Method() {}
