package timer

import (
	"time"

	"github.com/nats-io/nats.go"
)

// The JetStream message-schedule headers (nats-server ≥ 2.12).
const (
	// HeaderSchedule carries "@at <RFC3339>".
	HeaderSchedule = "Nats-Schedule"
	// HeaderScheduleTarget is the subject the firing is published on.
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleTTL is the message TTL given to the firing.
	HeaderScheduleTTL = "Nats-Schedule-TTL"
)

type jsmsg struct {
	subject string
	body    []byte
}

// nats builds the schedule message: "@at" with an RFC 3339 time (the server
// accepts fractional seconds) and the firing subject of the run as target.
func (m *jsmsg) nats(at time.Time) *nats.Msg {
	msg := nats.NewMsg(m.subject)
	msg.Data = m.body
	msg.Header.Set(HeaderSchedule, "@at "+at.UTC().Format(time.RFC3339Nano))
	run := m.subject[len(SubjectArm)+1:]
	if i := indexDot(run); i >= 0 {
		run = run[:i]
	}
	msg.Header.Set(HeaderScheduleTarget, SubjectDue+"."+run)
	msg.Header.Set(HeaderScheduleTTL, "1h")
	return msg
}

func indexDot(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}
