package eventlog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// Stored is one message of the log as stored, undecoded: what `weft
// repair show` prints.
type Stored struct {
	// Seq is the stream sequence; Subject the message's subject.
	Seq     uint64
	Subject string
	// Header holds the message's headers (with the server's Nats-* ones
	// of a direct get).
	Header nats.Header
	// Data is the body as stored.
	Data []byte
}

// Message reads the message at stream sequence seq as stored. It returns
// a *weft.Error unknown_run when no message has that sequence (deleted, or
// never written).
func (l *Log) Message(ctx context.Context, seq uint64) (Stored, error) {
	m, err := l.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.stream, fmt.Appendf(nil, `{"seq":%d}`, seq))
	if err != nil {
		return Stored{}, fmt.Errorf("eventlog: read seq %d: %w", seq, unavailable(err))
	}
	if st := m.Header.Get("Status"); st == "404" {
		return Stored{}, &weft.Error{Code: weft.CodeUnknownRun, Message: fmt.Sprintf("no message at stream sequence %d", seq)}
	} else if st != "" {
		return Stored{}, fmt.Errorf("eventlog: read seq %d: status %s %s", seq, st, m.Header.Get("Description"))
	}
	return Stored{Seq: seq, Subject: m.Header.Get(jetstream.SubjectHeader), Header: m.Header, Data: m.Data}, nil
}

// Quarantine reads run and returns the *PoisonError that quarantines it,
// nil when every message of the run folds.
func (l *Log) Quarantine(ctx context.Context, run string) (*PoisonError, error) {
	_, _, err := l.Load(ctx, run)
	var p *PoisonError
	if errors.As(err, &p) {
		return p, nil
	}
	return nil, err
}

// Void repairs run, quarantined by the message at stream sequence seq: it
// appends a void record (Void) that supersedes that message, so that every
// reader skips it from then on; the message itself stays in the log as
// evidence (docs/adr/0011). It refuses (invalid_request) unless the run is
// quarantined by exactly that message: a message readers can fold is never
// voided. The record is appended under the run's optimistic concurrency
// (a conflict when another message landed meanwhile). reason is required;
// by names the repairer. A run quarantined by several messages needs one
// Void per message, first to last.
func (l *Log) Void(ctx context.Context, run string, seq uint64, reason, by string, at time.Time) (VoidRecord, error) {
	return l.VoidSigned(ctx, run, seq, reason, by, nil, at)
}

// VoidSigned is Void with the repairer's signed proof signed (nil: none, by is
// recorded unverified): it must state exactly this void (proof.VoidSubject:
// the run, the sequence, the SHA-256 of the message's body, the reason),
// verify with its key and not have expired at at (proof_refused
// otherwise, nothing appended); the record then says it is verified, with
// its key, and carries it.
func (l *Log) VoidSigned(ctx context.Context, run string, seq uint64, reason, by string, signed *events.CommandProof, at time.Time) (VoidRecord, error) {
	if err := CheckRun(run); err != nil {
		return VoidRecord{}, err
	}
	if reason == "" {
		return VoidRecord{}, &weft.Error{Code: weft.CodeInvalidRequest, Message: "a void needs a reason"}
	}
	p, err := l.Quarantine(ctx, run)
	if err != nil {
		return VoidRecord{}, err
	}
	if p == nil {
		return VoidRecord{}, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("run %s is not quarantined: every message of it folds", run)}
	}
	if p.Seq != seq {
		return VoidRecord{}, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("run %s is quarantined by the message at stream sequence %d, not %d", run, p.Seq, seq)}
	}
	bad, err := l.Message(ctx, seq)
	if err != nil {
		return VoidRecord{}, err
	}
	last, err := l.lastSeq(ctx, run)
	if err != nil {
		return VoidRecord{}, err
	}
	sum := sha256.Sum256(bad.Data)
	v := Void{Seq: seq, SHA256: hex.EncodeToString(sum[:]), Bytes: len(bad.Data), Subject: bad.Subject,
		Problem: p.Reason, Reason: reason, By: by, Recorded: at.UTC()}
	if signed != nil {
		if err := proof.CheckCommand(*signed, proof.VoidSubject(run, seq, v.SHA256, reason), at); err != nil {
			var pe *proof.Error
			if errors.As(err, &pe) {
				return VoidRecord{}, &weft.Error{Code: weft.CodeProofRefused, Reason: pe.Reason, Message: pe.Message}
			}
			return VoidRecord{}, err
		}
		cp := *signed
		v.Identity, v.Proof = events.Identity{Verified: true, Key: cp.Key}, &cp
	}
	body, err := json.Marshal(struct {
		Schema int  `json:"schema"`
		Void   Void `json:"void"`
	}{MessageSchema, v})
	if err != nil {
		return VoidRecord{}, err
	}
	msg := nats.NewMsg(Subject(run))
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, "void-"+run+"-"+strconv.FormatUint(seq, 10))
	msg.Header.Set(jetstream.ExpectedStreamHeader, l.stream)
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, RunFilter(run))
	msg.Header.Set(HeaderRun, run)
	msg.Header.Set(HeaderVoid, strconv.FormatUint(seq, 10))
	actx, cancel := context.WithTimeout(ctx, l.attempt)
	defer cancel()
	ack, err := l.publish(actx, msg)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && isSequenceConflict(apiErr.ErrorCode) {
			return VoidRecord{}, &weft.Error{Code: weft.CodeConflict, Message: fmt.Sprintf("run %s: a message landed after stream sequence %d meanwhile; read the run again", run, last)}
		}
		return VoidRecord{}, fmt.Errorf("eventlog: void run %s seq %d: %w", run, seq, unavailable(err))
	}
	return VoidRecord{At: ack.Sequence, Void: v}, nil
}

// lastSeq is the stream sequence of run's last message, whatever it holds.
func (l *Log) lastSeq(ctx context.Context, run string) (uint64, error) {
	m, err := l.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.stream,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, RunFilter(run)))
	if err != nil {
		return 0, fmt.Errorf("eventlog: last of run %s: %w", run, unavailable(err))
	}
	if st := m.Header.Get("Status"); st != "" {
		return 0, fmt.Errorf("eventlog: last of run %s: status %s %s", run, st, m.Header.Get("Description"))
	}
	return strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
}

// Voids lists run's void records, oldest first: the repairs `weft audit
// verify` reports.
func (l *Log) Voids(ctx context.Context, run string) ([]VoidRecord, error) {
	if err := CheckRun(run); err != nil {
		return nil, err
	}
	var out []VoidRecord
	next := uint64(1)
	for {
		got, err := l.reader.get(ctx, l.stream, next, RunFilter(run), l.batch, l.attempt)
		if err != nil {
			return nil, fmt.Errorf("eventlog: voids of run %s: %w", run, unavailable(err))
		}
		more := false
		for _, m := range got {
			seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			next = seq + 1
			more = m.Header.Get("Nats-Num-Pending") != "0"
			if m.Header.Get(HeaderVoid) == "" {
				continue
			}
			if pm, err := parse(run, m.Header, m.Data); err == nil && pm.void != nil {
				out = append(out, VoidRecord{At: seq, Void: *pm.void})
			}
		}
		if !more || len(got) == 0 {
			return out, nil
		}
	}
}
