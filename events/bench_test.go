package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
)

var benchEvent = events.AttemptReported{Action: "3/call_3_1", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"id":"PAY-3","status":"sent"}`)}

func benchEnvelope(b *testing.B) events.Envelope {
	env, err := events.Encode(benchEvent)
	if err != nil {
		b.Fatal(err)
	}
	env.ID, env.Run, env.Version, env.Recorded = "01JDQ2Z4V9Q6H8K3M5N7P9R1T3", "run-0001", 7, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	env.Prev = env.Hash()
	return env
}

// BenchmarkEncodeEnvelope encodes one event and its envelope, as
// eventlog.Append does for every event (payload, envelope, hash).
func BenchmarkEncodeEnvelope(b *testing.B) {
	proto := benchEnvelope(b)
	for b.Loop() {
		env, err := events.Encode(benchEvent)
		if err != nil {
			b.Fatal(err)
		}
		env.ID, env.Run, env.Version, env.Recorded, env.Prev = proto.ID, proto.Run, proto.Version, proto.Recorded, proto.Prev
		if _, err := json.Marshal(env); err != nil {
			b.Fatal(err)
		}
		_ = env.Hash()
	}
}

// BenchmarkDecodeEnvelope decodes one stored envelope and its event, as
// every reader of the log does (load, hash check, fold).
func BenchmarkDecodeEnvelope(b *testing.B) {
	raw, err := json.Marshal(benchEnvelope(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var env events.Envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			b.Fatal(err)
		}
		if _, err := env.Event(); err != nil {
			b.Fatal(err)
		}
		_ = env.Hash()
	}
}
