package events_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
)

func TestEnvelopeHashIsSHA256OfEncoding(t *testing.T) {
	env := events.Envelope{
		ID: "01JAAAAAAAAAAAAAAAAAAAAAAA", Run: "r1", Version: 2, Type: "run_started", Schema: 1,
		Recorded: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Prev:     "abc", Payload: json.RawMessage(`{"a": 1}`),
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got, want := env.Hash(), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
	// Round trip through JSON keeps the hash (the log stores the encoding).
	var back events.Envelope
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Hash() != env.Hash() {
		t.Fatalf("hash changed over a JSON round trip")
	}
	// Every field takes part.
	changed := env
	changed.Prev = "abd"
	if changed.Hash() == env.Hash() {
		t.Fatalf("hash ignores Prev")
	}
	changed = env
	changed.Payload = json.RawMessage(`{"a":2}`)
	if changed.Hash() == env.Hash() {
		t.Fatalf("hash ignores Payload")
	}
}

func TestEnvelopeHashInvalidPayloadIsDeterministic(t *testing.T) {
	env := events.Envelope{ID: "x", Run: "r", Version: 1, Payload: json.RawMessage(`{not json`)}
	first, second := env.Hash(), env.Hash()
	if first != second || len(first) != 64 {
		t.Fatalf("hash of invalid payload unstable: %q then %q", first, second)
	}
	// The documented fallback: the payload is hashed as a JSON string.
	asString := events.Envelope{ID: "x", Run: "r", Version: 1, Payload: json.RawMessage(`"{not json"`)}
	if want := asString.Hash(); first != want {
		t.Fatalf("Hash of invalid payload = %s, want the hash with the payload as a string %s", first, want)
	}
	other := env
	other.Payload = json.RawMessage(`{not json either`)
	if other.Hash() == first {
		t.Fatalf("two different invalid payloads hash alike")
	}
}
