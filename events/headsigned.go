package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// NameHeadSigned is the stored name of HeadSigned, a runner's signature
// over the run's chain head (docs/adr/0026-signed-heads.md).
const NameHeadSigned Name = "head_signed"

// HeadSigned is appended by a runner that holds a signing key after every
// decision a person made (an approval answered by a person, a
// reconciliation, a resolution, a cancellation) and after the run's end:
// the runner's ed25519 signature (an nkey user key, Key) over the run's
// head just before it — Version, the version of the event before it, and
// Hash, that event's envelope hash (Envelope.Hash). It changes nothing of
// the run; it may follow RunFinished. An auditor who trusts Key knows the
// history up to Version is the one the runner recorded: a rewritten event
// at or before Version no longer hashes to Hash (docs/security.md).
type HeadSigned struct {
	// Version and Hash are the signed head: the version and hash of the
	// event just before this one.
	Version uint64 `json:"version"`
	Hash    string `json:"hash"`
	// Key is the signer's public nkey (a user key, "U…"); Signer names it
	// (the runner's id), for people: only Key is checked.
	Key    string `json:"key"`
	Signer string `json:"signer,omitempty"`
	// Signature is the base64url (unpadded) ed25519 signature of
	// HeadDigest(run, Version, Hash, Key).
	Signature string `json:"sig"`
	// End is set when the signed head is a finished run's (the run
	// finished at or before Version). It is outside the signature: only a
	// hint that lets a reader of the last log message alone (the driver
	// index rebuild) tell a finished run.
	End bool `json:"end,omitempty"`
}

// EventName returns NameHeadSigned, the durable name HeadSigned is stored under.
func (HeadSigned) EventName() Name { return NameHeadSigned }

// SchemaVersion returns 1, the version of HeadSigned's encoding (docs/protocol.md).
func (HeadSigned) SchemaVersion() int { return 1 }
func (HeadSigned) isEvent()           {}

// headDomain separates the digests of signed heads from anything else the
// same key signs (approval proofs use "weft approval proof v1").
const headDomain = "weft signed head v1"

// HeadDigest returns the SHA-256 digest a HeadSigned signature covers: of
// the domain string "weft signed head v1" followed by, each as a 4-byte
// big-endian length and its bytes: the run, the version (decimal), the hash
// (lowercase hex) and the key. The run is in it, so a signature never
// vouches for another run's history.
func HeadDigest(run string, version uint64, hash, key string) [32]byte {
	var b bytes.Buffer
	b.WriteString(headDomain)
	for _, f := range []string{run, strconv.FormatUint(version, 10), hash, key} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		b.Write(n[:])
		b.WriteString(f)
	}
	return sha256.Sum256(b.Bytes())
}
