// Package bad breaks every layering rule, to prove the check catches them.
package bad

import (
	"net/http"
	"os"
	clock "time"

	"github.com/nats-io/nats.go"
)

var _ = http.MethodGet
var _ = os.Getenv
var _ = nats.Connect

// Now reads the clock through an aliased import.
func Now() clock.Time { return clock.Now() }

// Age reads the clock too.
func Age(t clock.Time) clock.Duration { return clock.Since(t) }
