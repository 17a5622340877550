package api

import (
	"encoding/json"
	"fmt"

	"github.com/weftrun/weft"
)

// The per-field limits of command bodies, in bytes of the decoded string
// (docs/protocol/40-commands.md, "Limits"; docs/adr/0016). A field over
// its limit is refused payload_too_large, the message naming the field and
// the limit, before anything is looked up or written. Content fields
// (reconcile, resolve, settle, report) are bounded by the run's max result
// bytes and MaxBody instead.
const (
	// MaxInput bounds a start's input: 512 KiB, about 130k tokens, the
	// whole context window of most models (every model request carries
	// the input again).
	MaxInput = 512 << 10
	// MaxCredential bounds an approver's credential (a token, a JWT, a
	// signed assertion): 16 KiB, twice what HTTP servers accept in one
	// header.
	MaxCredential = 16 << 10
	// MaxProof bounds a signed approval proof as encoded (its fields are
	// a key, ids, a digest and a signature: under 1 KiB in practice).
	MaxProof = 4 << 10
	// MaxText bounds free text recorded with a result: a report's or a
	// settlement's message (the definite failure the model sees) and
	// evidence (what may have happened).
	MaxText = 64 << 10
	// MaxReason bounds a reason or summary a person reads: reject's and
	// cancel's reason, a settlement's summary (telemetry).
	MaxReason = 4 << 10
	// MaxID bounds identifiers and names chosen by callers: command_id,
	// correlation, action, approver, by, worker, cause.
	MaxID = 256
)

// field is one string field of a request and its limit.
type field struct {
	name  string
	value string
	max   int
}

// bounded refuses the first field over its limit: payload_too_large.
func bounded(fs ...field) error {
	for _, f := range fs {
		if len(f.value) > f.max {
			return tooLarge(f.name, len(f.value), f.max)
		}
	}
	return nil
}

func tooLarge(name string, n, max int) *weft.Error {
	return &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("%s of %d bytes is over its limit of %d bytes", name, n, max)}
}

// boundedProof refuses a signed proof over MaxProof as encoded.
func boundedProof(p any) error {
	if p == nil {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: "proof: " + err.Error()}
	}
	if len(b) > MaxProof {
		return tooLarge("proof", len(b), MaxProof)
	}
	return nil
}

// checkRun refuses a run id that breaks the run id grammar (1 to 128 of
// [A-Za-z0-9_-]), the empty one included: invalid_name, before any lookup.
func checkRun(run string) error {
	if !validRun(run) {
		return &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("run id %q: a run id is 1 to 128 characters of [A-Za-z0-9_-]", run)}
	}
	return nil
}

func validRun(v string) bool {
	if len(v) < 1 || len(v) > 128 {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// checkRevision refuses an answer without a revision (revisions start at
// 1): invalid_request, not stale_reference, since no revision was named.
func checkRevision(rev int) error {
	if rev < 1 {
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("revision is required (the pending request's revision, 1 or more), got %d", rev)}
	}
	return nil
}
