// Package events is the closed catalogue of the events that make up a run's
// history on the WEFT_EVENTS stream, their JSON encoding and Describe.
//
// Every fact about a run is one of these events. The set is closed: each event
// is a concrete struct implementing Event through an unexported marker, its
// durable name is a hand-written constant (never derived from a Go type
// name), and Decode is the one switch that turns a stored envelope back into
// an event. A name is never renamed or reused; a retired name stays reserved
// here. A change to an event's fields that old readers cannot ignore bumps its
// schema version, and Decode keeps reading every older version.
//
// The package is pure: no clock, no I/O, no ids are generated here. Times and
// ids arrive as arguments (see ARCHITECTURE.md, "Determinism rules").
package events

import (
	"encoding/json"
	"time"
)

// Name is the stable wire name of an event type, such as "run_started".
type Name string

// Event is one fact of a run's history. Implementations are the structs of
// this package only.
type Event interface {
	// EventName is the durable name of the event type.
	EventName() Name
	// SchemaVersion is the version of the event's payload schema.
	SchemaVersion() int
	isEvent()
}

// Envelope is the stored form of one event: the metadata every event carries
// and its JSON payload. It is the JSON object published on WEFT_EVENTS
// (docs/protocol.md, "Event envelope").
type Envelope struct {
	// ID is the event's ULID, unique across all runs; its time part is the
	// recorded time.
	ID string `json:"id"`
	// Run is the run id.
	Run string `json:"run"`
	// Version is the event's 1-based position in its run's history.
	Version uint64 `json:"version"`
	// Type is the event's name.
	Type Name `json:"type"`
	// Schema is the payload's schema version.
	Schema int `json:"schema"`
	// Recorded is the store time at which the event was appended, passed in
	// by the appender (never read inside the decision core).
	Recorded time.Time `json:"recorded"`
	// Prev is the hash of the run's previous event (hex SHA-256 of its
	// encoded envelope), empty for the first event: a per-run chain that
	// makes the history tamper-evident.
	Prev string `json:"prev,omitempty"`
	// Payload is the event's JSON encoding.
	Payload json.RawMessage `json:"payload"`
}

// Encode builds the envelope of e; the caller fills ID, Run, Version,
// Recorded and Prev.
func Encode(e Event) (Envelope, error) {
	p, err := json.Marshal(e)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{Type: e.EventName(), Schema: e.SchemaVersion(), Payload: p}, nil
}

// Event decodes the envelope's payload.
func (env Envelope) Event() (Event, error) { return Decode(env.Type, env.Schema, env.Payload) }

// Recorded is an event together with the metadata of its envelope, as the
// decision core and projections see it.
type Recorded struct {
	// Run, Version and At come from the envelope.
	Run     string
	Version uint64
	At      time.Time
	// Event is the decoded event.
	Event Event
}
