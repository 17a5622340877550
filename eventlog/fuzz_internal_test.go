package eventlog

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/internal/fuzzseed"
)

// parseSeed parses a message as readers do: its run taken from the
// subject, its Weft-Void header when void is not empty.
func parseSeed(subject, void string, data []byte) (string, message, error) {
	h := nats.Header{}
	if void != "" {
		h.Set(HeaderVoid, void)
	}
	run := runOf(subject)
	m, err := parse(run, h, data)
	return run, m, err
}

// FuzzLogMessage fuzzes the reading of one WEFT_EVENTS message, which
// anyone allowed to publish on weft.ev.> may have written
// (docs/protocol/10-log.md): parse never panics; what it accepts
// is a void record or events all of the subject's run, each decodable,
// chained within the message; what it refuses it says why in a reason
// that stays short (it becomes a quarantine's reason), whatever the
// message holds.
func FuzzLogMessage(f *testing.F) {
	f.Fuzz(func(t *testing.T, subject, void string, data []byte) {
		run, m, err := parseSeed(subject, void, data)
		if err != nil {
			if n := len(err.Error()); n > 600 {
				t.Fatalf("a refusal's reason of %d bytes: %.200s", n, err)
			}
			return
		}
		if m.void != nil {
			if len(m.envs) > 0 || m.void.Seq == 0 || m.void.Reason == "" {
				t.Fatalf("accepted void record %+v with %d events", m.void, len(m.envs))
			}
			return
		}
		if len(m.envs) == 0 {
			t.Fatal("accepted a message without events")
		}
		for i, env := range m.envs {
			if env.Run != run {
				t.Fatalf("accepted event %d of run %q on run %q's subject", i+1, env.Run, run)
			}
			if _, err := env.Event(); err != nil {
				t.Fatalf("accepted event %d that does not decode: %v", i+1, err)
			}
			if i > 0 && (env.Version != m.envs[i-1].Version+1 || env.Prev != m.envs[i-1].Hash()) {
				t.Fatalf("accepted event %d off the message's chain", i+1)
			}
		}
	})
}

// TestLogMessageSeedsAreMeaningful: FuzzLogMessage's seeds named valid-*
// are accepted, every other seed refused.
func TestLogMessageSeedsAreMeaningful(t *testing.T) {
	seeds, err := fuzzseed.Read(".", "FuzzLogMessage")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		if _, _, err := parseSeed(s.Values[0], s.Values[1], []byte(s.Values[2])); s.Valid() != (err == nil) {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}
