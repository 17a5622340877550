package eventlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// PoisonError is returned (or delivered, by Subscribe) when a message of a
// run's subjects cannot be folded: its body is not JSON or not a log
// message, an envelope is of another run, of an unknown event type or
// schema, a payload does not decode, the versions or the hash chain do not
// continue, or a Weft-* header contradicts the body. The run is
// quarantined: readers never act on a state they cannot derive
// (docs/adr/0011), and every other run goes on. It unwraps to ErrCorrupt
// and to a *weft.Error with code quarantined. The quarantine ends when the
// message is voided (Log.Void, `weft repair drop`).
type PoisonError struct {
	// Run is the run whose subject holds the message ("" when the subject
	// names no valid run: the message belongs to no run).
	Run string
	// Seq is the message's WEFT_EVENTS stream sequence.
	Seq uint64
	// Reason says in a few words what is wrong with it.
	Reason string
}

// Error names the run, the sequence (when known) and the reason.
func (e *PoisonError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("run %s quarantined: a message of its log cannot be folded: %s", e.Run, e.Reason)
	}
	return fmt.Sprintf("run %s quarantined: the message at stream sequence %d cannot be folded: %s", e.Run, e.Seq, e.Reason)
}

// Unwrap returns ErrCorrupt and the protocol error quarantined.
func (e *PoisonError) Unwrap() []error {
	return []error{ErrCorrupt, &weft.Error{Code: weft.CodeQuarantined, Message: e.Error()}}
}

// HeaderVoid is set on a void record: the stream sequence it voids.
const HeaderVoid = "Weft-Void"

// Void is the record of a repair: the message at stream sequence Seq of the
// run's subjects, which no reader can fold, is superseded. It is stored as
// a message of its own on the run's subject, {"schema":1,"void":{...}},
// appended under the run's optimistic concurrency like any decision; it is
// not an event (it changes no version and no hash chain: the voided
// message held no event of the chain). Readers skip the voided message and
// the record itself; `weft audit verify` lists the records.
type Void struct {
	// Seq is the stream sequence of the voided message.
	Seq uint64 `json:"seq"`
	// SHA256 is the hex SHA-256 of the voided message's body, Bytes its
	// length: what was superseded, even once the message is erased.
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	// Subject is the voided message's subject.
	Subject string `json:"subject"`
	// Problem is what readers found wrong with it (PoisonError.Reason).
	Problem string `json:"problem"`
	// Reason is why the repairer voided it; By who did (free text: the
	// repairer's name or credentials).
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
	// Identity says whether a signed proof vouches for who voided it
	// (verified, and the proof's key), Proof is that proof
	// (proof.VoidSubject, signed with the repairer's person key; nil: By
	// was typed, unverified). Whether the key is a person's is the
	// auditor's to check (`weft audit verify --people`).
	events.Identity
	Proof *events.CommandProof `json:"proof,omitempty"`
	// Recorded is when the record was appended (the repairer's clock).
	Recorded time.Time `json:"recorded"`
}

// VoidRecord is a Void as a reader found it: the record and the stream
// sequence of the message holding it.
type VoidRecord struct {
	// At is the stream sequence of the void record.
	At uint64 `json:"at"`
	Void
}

// runOf returns the run of a log subject weft.ev.<run>.<...>, or "" when
// the subject names no valid run.
func runOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return ""
	}
	run, tail, ok := strings.Cut(rest, ".")
	if !ok || tail == "" || CheckRun(run) != nil {
		return ""
	}
	return run
}

// message is one parsed log message: a decision's events or a void record.
type message struct {
	envs []events.Envelope
	void *Void
}

// parse checks one message of run (taken from its subject) and returns its
// events or its void record; an error says why no reader may fold it. It
// checks the body, every envelope (run, decodable event, versions and chain
// within the message) and the Weft-* headers when they are present.
func parse(run string, h nats.Header, data []byte) (message, error) {
	if run == "" {
		return message{}, errors.New("the subject names no run")
	}
	var b struct {
		Schema int               `json:"schema"`
		Events []events.Envelope `json:"events"`
		Void   *Void             `json:"void"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return message{}, fmt.Errorf("not a log message: %v", short(err.Error()))
	}
	if b.Schema != MessageSchema {
		return message{}, fmt.Errorf("message schema %d unknown", b.Schema)
	}
	if b.Void != nil {
		if len(b.Events) > 0 {
			return message{}, errors.New("a void record holds no events")
		}
		if b.Void.Seq == 0 || b.Void.Reason == "" {
			return message{}, errors.New("a void record without its sequence or reason")
		}
		if v := h.Get(HeaderVoid); v != strconv.FormatUint(b.Void.Seq, 10) {
			return message{}, fmt.Errorf("header %s %q does not name the record's sequence %d", HeaderVoid, short(v), b.Void.Seq)
		}
		return message{void: b.Void}, nil
	}
	if len(b.Events) == 0 {
		return message{}, errors.New("message without events")
	}
	for i, env := range b.Events {
		if env.Run != run {
			return message{}, fmt.Errorf("event %d names run %q", i+1, short(env.Run))
		}
		if i > 0 && (env.Version != b.Events[i-1].Version+1 || env.Prev != b.Events[i-1].Hash()) {
			return message{}, fmt.Errorf("event %s version %d breaks the message's chain", short(env.ID), env.Version)
		}
		if _, err := env.Event(); err != nil {
			return message{}, fmt.Errorf("event %s version %d: %v", short(env.ID), env.Version, short(err.Error()))
		}
	}
	if v := h.Get(HeaderRun); v != "" && v != run {
		return message{}, fmt.Errorf("header %s %q names another run", HeaderRun, short(v))
	}
	if v := h.Get(HeaderCount); v != "" && v != strconv.Itoa(len(b.Events)) {
		return message{}, fmt.Errorf("header %s %q but the message holds %d events", HeaderCount, short(v), len(b.Events))
	}
	if v := h.Get(HeaderVersion); v != "" && v != strconv.FormatUint(b.Events[len(b.Events)-1].Version, 10) {
		return message{}, fmt.Errorf("header %s %q but the last event is version %d", HeaderVersion, short(v), b.Events[len(b.Events)-1].Version)
	}
	return message{envs: b.Events}, nil
}

// short bounds a text taken from a bad message, so that a quarantine's
// reason stays short whatever the message holds.
func short(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
