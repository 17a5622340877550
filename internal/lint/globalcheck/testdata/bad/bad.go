// Package bad declares exported variables of every kind the check tells
// apart.
package bad

import (
	"errors"
	"fmt"
	"time"
)

// codedError is an error type, used by pointer.
type codedError struct{ code string }

func (e *codedError) Error() string { return e.code }

// ErrPlain is a sentinel from errors.New.
var ErrPlain = errors.New("plain")

// ErrWrapped is a sentinel from fmt.Errorf.
var ErrWrapped = fmt.Errorf("wrapped: %w", ErrPlain)

// ErrCoded is a sentinel of a pointer error type.
var ErrCoded = &codedError{code: "coded"}

// ErrTyped is declared with the error interface type.
var ErrTyped error = ErrPlain

// Table is a mutable table.
var Table = []string{"a", "b"}

// Epoch is a mutable value.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Coded is a value of the error type's element, which does not implement
// error itself.
var Coded = codedError{code: "value"}

var unexported = []string{"fine"}

// Const is a constant, never listed.
const Const = "fine"
