package audit

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// HeadCheck is the check of one signed head (events.HeadSigned): the event
// recording it (Version), the head it covers (Head, HeadHash), who signed
// it (Key, Signer) and whether the key is one the auditor trusts.
type HeadCheck struct {
	Version  uint64 `json:"version"`
	Head     uint64 `json:"head"`
	HeadHash string `json:"head_hash"`
	Key      string `json:"key"`
	Signer   string `json:"signer,omitempty"`
	Trusted  bool   `json:"trusted"`
}

// WithTrust names the keys (nkey user public keys, "U…") whose signed
// heads the auditor trusts. With it, Verify requires the history to be
// signed by them: every signed head's key is one of keys (else "untrusted"),
// at least one head is signed (else "unsigned"), and the history ends with
// a signed head over a finished run (else "unsigned": it may have been cut
// back to an earlier head, or events were added after it) unless a head
// is named (WithHeadAt, WithHead) or WithUnfinished accepts a run that has
// not ended.
func WithTrust(keys ...string) Option {
	return func(c *config) {
		if c.trust == nil {
			c.trust = map[string]bool{}
		}
		for _, k := range keys {
			c.trust[k] = true
		}
	}
}

// WithHeadAt checks that the history holds the event version with hash
// hash: a head taken from an independent source (the live log, a signed
// head kept elsewhere). A history that ends before version was cut.
func WithHeadAt(version uint64, hash string) Option {
	return func(c *config) { c.at = append(c.at, headAt{version, hash}) }
}

// WithUnfinished accepts a history that does not end where the run's
// record ends: a live run's export. Without it, WithTrust requires the
// history to end with a trusted signed head over a finished run, and
// WithHeadAt requires the named head to be the history's last event.
func WithUnfinished() Option { return func(c *config) { c.unfinished = true } }

type headAt struct {
	version uint64
	hash    string
}

// ParseHead parses a head given as VERSION:HASH.
func ParseHead(s string) (version uint64, hash string, err error) {
	v, h, ok := strings.Cut(s, ":")
	if !ok || h == "" {
		return 0, "", fmt.Errorf("head %q: want VERSION:HASH", s)
	}
	version, err = strconv.ParseUint(v, 10, 64)
	if err != nil || version == 0 {
		return 0, "", fmt.Errorf("head %q: the version is not a positive number", s)
	}
	return version, strings.ToLower(h), nil
}

// checkHeads checks the signed heads of envs (whose hashes are hashes)
// and the heads named by WithHeadAt, as WithTrust and WithHeadAt describe;
// every signature is checked, trusted keys named or not.
func checkHeads(rep *Report, c config, envs []events.Envelope, hashes []string) *Problem {
	for _, h := range c.at {
		if h.version == 0 {
			return problem(KindHead, envs[0], "the head you named, 0:%s, is no event: versions start at 1", short(h.hash))
		}
		if h.version > uint64(len(envs)) {
			last := envs[len(envs)-1]
			return problem(KindHead, last, "the history ends at version %d, before the head %d:%s you named: its last events were dropped", last.Version, h.version, short(h.hash))
		}
		if got := hashes[h.version-1]; got != h.hash {
			env := envs[h.version-1]
			return problem(KindHead, env, "event %d (%s, %s) hashes to %s, but the head you named is %d:%s: the history up to it was rewritten", env.Version, env.ID, env.Type, short(got), h.version, short(h.hash))
		}
		if n := uint64(len(envs)); h.version < n && !c.unfinished {
			env := envs[h.version]
			return problem(KindHead, env, "events %d to %d follow the head %d:%s you named: nobody vouches for them (give the run's last head, or --unfinished to accept them)", h.version+1, n, h.version, short(h.hash))
		}
	}
	for i, env := range envs {
		if env.Type != events.NameHeadSigned {
			continue
		}
		ev, err := env.Event()
		if err != nil {
			return problem(KindDecode, env, "event %d (%s, %s) does not decode: %v", env.Version, env.ID, env.Type, err)
		}
		hs := ev.(events.HeadSigned)
		hc := HeadCheck{Version: env.Version, Head: hs.Version, HeadHash: hs.Hash, Key: hs.Key, Signer: hs.Signer, Trusted: c.trust[hs.Key]}
		rep.Heads = append(rep.Heads, hc)
		switch {
		case i == 0 || hs.Version != env.Version-1:
			return problem(KindSignature, env, "event %d (%s) signs head %d, not the event before it", env.Version, env.ID, hs.Version)
		case hs.Hash != hashes[i-1]:
			prev := envs[i-1]
			return problem(KindSignature, env, "event %d signs head %d:%s, but event %d (%s, %s) hashes to %s: the history up to it was rewritten", env.Version, hs.Version, short(hs.Hash), prev.Version, prev.ID, prev.Type, short(hashes[i-1]))
		}
		if why := verifyHead(env.Run, hs); why != "" {
			return problem(KindSignature, env, "event %d: the signature of head %d by %s does not verify: %s", env.Version, hs.Version, hs.Key, why)
		}
		if c.trust != nil && !hc.Trusted {
			return problem(KindUntrusted, env, "event %d: head %d is signed by %s (%s), a key you do not trust: the history was re-signed, or the key is missing from --trust", env.Version, hs.Version, hs.Key, orDash(hs.Signer))
		}
	}
	last := envs[len(envs)-1]
	if n := len(rep.Heads); n > 0 {
		rep.SignedThrough = rep.Heads[n-1].Head
		if last.Type == events.NameHeadSigned {
			rep.SignedThrough = last.Version
		}
	}
	if c.trust == nil {
		return nil
	}
	if len(rep.Heads) == 0 {
		return problem(KindUnsigned, last, "no head of the history is signed: it cannot be tied to a key you trust (was the runner given a head key?)")
	}
	return nil
}

// checkEnd is the check WithTrust adds once the history refolded: the
// history ends with a signed head over a finished run, so that a cut back
// to an earlier signed head, or unsigned events after it, show. A head
// the auditor named (WithHeadAt, the live log's head) ends the history in
// its place; WithUnfinished asks it only of a run that ended.
func checkEnd(rep Report, c config, envs []events.Envelope, finished bool) *Problem {
	last := envs[len(envs)-1]
	if c.trust == nil || len(c.at) > 0 || c.head != "" {
		return nil
	}
	endsSigned := rep.SignedThrough == last.Version
	switch {
	case finished && !endsSigned:
		return problem(KindUnsigned, last, "the run ended, but the history ends at version %d (%s, %s) after its last signed head %d: its signed end head was dropped, or events were added after it", last.Version, last.ID, last.Type, rep.Heads[len(rep.Heads)-1].Head)
	case finished || c.unfinished:
		return nil
	case endsSigned:
		return problem(KindUnsigned, last, "the history ends at version %d with a signed head, but the run has not ended: it may have been cut back to that head; give --head VERSION:HASH from the live log, or --unfinished for a run still going", last.Version)
	}
	return problem(KindUnsigned, last, "the history ends at version %d (%s, %s), after its last signed head %d, and the run has not ended: nobody vouches for events %d to %d, and it may have been cut; give --head VERSION:HASH from the live log, or --unfinished for a run still going", last.Version, last.ID, last.Type, rep.Heads[len(rep.Heads)-1].Head, rep.SignedThrough+2, last.Version)
}

// verifyHead returns "" when hs's signature verifies, or why not.
func verifyHead(run string, hs events.HeadSigned) string {
	pub, err := proof.PublicKey(hs.Key)
	if err != nil {
		return fmt.Sprintf("key %q: %v", hs.Key, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(hs.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "the signature is not a base64url ed25519 signature"
	}
	d := events.HeadDigest(run, hs.Version, hs.Hash, hs.Key)
	if !ed25519.Verify(pub, d[:], sig) {
		return "it was altered, or signed by another key"
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
