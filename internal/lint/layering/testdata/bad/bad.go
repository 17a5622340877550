// Package bad breaks every layering rule, to prove the check catches them.
package bad

import (
	"log"
	"log/slog"
	"net/http"
	"os"
	clock "time"

	"github.com/nats-io/nats.go"
)

var _ = http.MethodGet
var _ = os.Getenv
var _ = nats.Connect
var _ = slog.Info

// Now reads the clock through an aliased import.
func Now() clock.Time { return clock.Now() }

// Age reads the clock too.
func Age(t clock.Time) clock.Duration { return clock.Since(t) }

// Wait sleeps, waits on a timer channel and arms a callback: all three
// make a decision depend on when it runs.
func Wait() {
	clock.Sleep(clock.Millisecond)
	<-clock.After(clock.Millisecond)
	clock.AfterFunc(clock.Millisecond, func() {})
}

// Spawn starts a goroutine and writes a log line: a pure function does
// neither.
func Spawn() {
	go func() {}()
	log.Print("spawned")
}
