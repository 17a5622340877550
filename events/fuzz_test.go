package events_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/fuzzseed"
)

// FuzzEnvelope fuzzes the decoding of an event envelope as stored on
// WEFT_EVENTS (docs/protocol/10-log.md, "The event envelope"): whatever the
// bytes, decoding an envelope and its payload never
// panics; a payload that decodes is an event of the closed catalogue whose
// encoding is stable (encoded again and decoded, it is the same event) and
// that Describe prints.
func FuzzEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var env events.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			return
		}
		ev, err := env.Event()
		if err != nil {
			return
		}
		if ev.EventName() != env.Type {
			t.Fatalf("envelope of type %s decoded as %s", env.Type, ev.EventName())
		}
		re, err := events.Encode(ev)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", env.Type, err)
		}
		ev2, err := re.Event()
		if err != nil {
			t.Fatalf("%s encoded as %s does not decode: %v", env.Type, re.Payload, err)
		}
		p1, _ := json.Marshal(ev)
		p2, _ := json.Marshal(ev2)
		if !bytes.Equal(p1, p2) {
			t.Fatalf("%s changed in a round trip:\n%s\n%s", env.Type, p1, p2)
		}
		_ = events.Describe(ev)
	})
}

// TestEnvelopeSeedsAreMeaningful: FuzzEnvelope's seeds named valid-*
// decode to an event, every other seed is refused.
func TestEnvelopeSeedsAreMeaningful(t *testing.T) {
	seeds, err := fuzzseed.Read(".", "FuzzEnvelope")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		var env events.Envelope
		err := json.Unmarshal([]byte(s.Values[0]), &env)
		if err == nil {
			_, err = env.Event()
		}
		if s.Valid() != (err == nil) {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}
