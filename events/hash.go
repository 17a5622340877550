package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Hash is the hex SHA-256 of the envelope's JSON encoding (encoding/json:
// fields in declaration order, no insignificant whitespace, payload
// compacted). The event log stores each envelope in exactly this encoding,
// so hashing the stored bytes of an envelope gives the same value. The next
// event of the run carries it as Prev, chaining the run's history.
//
// An envelope whose payload is not valid JSON cannot be stored; Hash then
// hashes the encoding with the payload given as a JSON string, so the
// result is still deterministic.
func (env Envelope) Hash() string {
	b, err := json.Marshal(env)
	if err != nil {
		type invalid struct {
			Envelope
			Payload string `json:"payload"`
		}
		b, _ = json.Marshal(invalid{Envelope: env, Payload: string(env.Payload)})
	}
	return HashEncoded(b)
}

// HashEncoded is Hash of an envelope given as its JSON encoding (the bytes
// json.Marshal gives for it): for a writer that has just encoded the
// envelope, without encoding it again.
func HashEncoded(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
