package runner

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// EnvHeadKey names the environment variable holding the path of a runner's
// head signing key (an nkeys user seed file), read by the runner commands
// when no --head-key flag is given.
const EnvHeadKey = "WEFT_HEAD_KEY"

// WithHeadKey makes the runner sign its runs' chain heads with kp (an nkeys
// user key pair): every decision a person made and the run's end carry
// events.HeadSigned over their last event, in their own log message
// (docs/adr/0026-signed-heads.md, docs/adr/0044). Without it nothing is
// signed, and `weft audit verify` says so.
func WithHeadKey(kp nkeys.KeyPair) Option { return func(r *Runner) { r.headKey = kp } }

// ReadHeadKey reads a head signing key: a file holding an nkeys user seed
// ("SU…").
func ReadHeadKey(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("head signing key: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("head signing key %s: %w", path, err)
	}
	if pub, _ := kp.PublicKey(); nkeys.Prefix(pub) != nkeys.PrefixByteUser {
		return nil, fmt.Errorf("head signing key %s: not an nkeys user seed (SU…)", path)
	}
	return kp, nil
}

// HeadKeyFile is the file name of a store's or a deployment's runner head
// signing key, as `weft dev` and `weft roles init` write it.
const HeadKeyFile = "head.nk"

// LoadOrCreateHeadKey reads the head signing key at path, or creates one
// there (an nkeys user seed, mode 0600) when the file does not exist. It
// reports whether it created it.
func LoadOrCreateHeadKey(path string) (nkeys.KeyPair, bool, error) {
	if _, err := os.Stat(path); err == nil {
		kp, err := ReadHeadKey(path)
		return kp, false, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("head signing key: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, false, err
	}
	seed, _ := kp.Seed()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("head signing key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("head signing key: %w", err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("head signing key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("head signing key: %w", err)
	}
	return kp, true, nil
}

// sealFor returns the seal of evs, the decision about to be appended to
// rn, when the runner holds a head key and the decision leaves a
// signature owed (aggregate.HeadOwedAfter: a decision a person made, the
// run's end or an append after it, or a head its driver left unsigned
// before it, follows the last signed head): events.HeadSigned over the
// decision's last envelope, which eventlog stamps as the last event of the
// decision's own message (eventlog.AppendSealed, docs/adr/0044). One
// append, and no window in which the decision is recorded and its head
// not signed. It returns nil when nothing is owed. A signature that cannot
// be made fails the append before anything is sent (an
// *eventlog.NotSentError, unavailable): nothing is recorded, so nothing is
// owed — a decision appended unsealed would owe a signature with no
// weft_drivers entry to find it by (keyBeforeAppend puts none for a sealed
// decision's signature; docs/semantics.md §8). New refuses a head key that
// cannot sign, so that this is a key that stopped signing.
//
// It covers, with one rule: the decision itself; a takeover
// (events.RunRecovered) of a run whose dead driver left a decision
// unsigned — the new driver's takeover is sealed, and every runner that
// could take the run over folds the same log, so decides the same
// (docs/adr/0026-signed-heads.md); and what is appended to a finished run
// (a worker's late report refused, a settlement, a reconciliation), so
// that a finished run's history ends with a signed head (audit.WithTrust).
func (r *Runner) sealFor(rn *run, evs []events.Event) eventlog.Seal {
	if r.headKey == nil || r.unsealed {
		return nil
	}
	owed, end := aggregate.HeadOwedAfter(rn.state, evs)
	if !owed {
		return nil
	}
	id := rn.id
	return func(version uint64, hash string) (events.Event, error) {
		hs, err := r.headSigned(id, version, hash, end)
		if err != nil {
			r.log.Warn("head not sealed: the decision is not appended", "run", id, "version", version, "err", err)
			return nil, err
		}
		return hs, nil
	}
}

// signHead appends events.HeadSigned over rn's head, after an append,
// when the runner holds a head key and a signature is still owed
// (aggregate.State.HeadBehind): the append was not sealed (a runner with
// WithoutSeal, in tests: the path of a runner before docs/adr/0044; a
// seal that cannot be made fails the append instead, sealFor), so a
// decision a person made or the run's end follows the last signed head, or
// something was appended to a finished run. After a sealed append nothing
// is owed, and for a finished run it only deletes the weft_drivers entry
// keyBeforeAppend put.
//
// A signature that fails is logged and the run woken again (retryLater),
// whose wake signs it (signBehind); meanwhile the run is kept in memory
// with its entry (isIdle).
func (r *Runner) signHead(ctx context.Context, rn *run) {
	if r.headKey == nil {
		return
	}
	if _, fin := rn.state.Finished(); fin && !rn.driven {
		r.signAfterEnd(ctx, rn)
		return
	}
	if !rn.state.HeadBehind() {
		return
	}
	if err := r.sign(ctx, rn); err != nil {
		r.log.Warn("head not signed", "run", rn.id, "version", rn.head.Version, "err", err)
		r.retryLater(rn.id)
	}
}

// signAfterEnd signs the head of rn, a finished run something was just
// appended to, when that append was not sealed, and deletes the
// weft_drivers entry keyBeforeAppend put before that append, if it put
// one. When the signature or the delete fails, the entry stays and the
// run is woken again (retryLater): the wake of a finished run signs what
// follows its last signed end head (signBehind) and deletes the entry —
// as the partition's owner does when this runner dies first.
func (r *Runner) signAfterEnd(ctx context.Context, rn *run) {
	if rn.state.HeadBehind() {
		if err := r.sign(ctx, rn); err != nil {
			r.log.Warn("head not signed", "run", rn.id, "version", rn.head.Version, "err", err)
			r.retryLater(rn.id)
			return
		}
	}
	if !rn.keyed {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.removeDriverKey(dctx, rn.id, rn.keyRev); err != nil {
		r.log.Warn("driver key delete", "run", rn.id, "err", err)
		r.retryLater(rn.id)
		return
	}
	rn.keyed, rn.keyRev = false, 0
	r.finished.add(rn.id)
}

// signBehind signs rn's head when a signature is owed
// (aggregate.State.HeadBehind: a decision a person made, the run's end, or
// an append after it follows the last signed head) and this runner holds a
// head key. It is how a runner that wakes a run whose weft_drivers entry
// is still there finishes what its driver left: the driver appended a
// decision unsealed (a runner before docs/adr/0044) and died before its
// signature (signHead), and nothing else would sign before the next
// decision — never, for a finished run (a running run's takeover is
// sealed, sealFor). An error (the store did not answer, the log moved:
// the append is at rn's head) leaves the head unsigned: the caller keeps
// the entry, so that the wake is made again.
func (r *Runner) signBehind(ctx context.Context, rn *run) error {
	if r.headKey == nil || !rn.state.HeadBehind() {
		return nil
	}
	return r.sign(ctx, rn)
}

// sign appends events.HeadSigned over rn's head, signed with the runner's
// head key (which it must hold).
func (r *Runner) sign(ctx context.Context, rn *run) error {
	if rn.head.Hash == "" {
		return nil
	}
	_, end := rn.state.Finished()
	hs, err := r.headSigned(rn.id, rn.head.Version, rn.head.Hash, end)
	if err != nil {
		return err
	}
	envs, head, err := r.evlog.Append(ctx, rn.id, rn.head, r.clock(rn), hs)
	if err != nil {
		return err
	}
	recs, err := recorded(envs)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		rn.evolve(rec)
	}
	rn.head = head
	return nil
}

// checkHeadKey makes sure kp, a runner's head key, signs: New refuses one
// that cannot (a public key alone, a wiped seed), rather than fail each
// decision that owes a signed head (sealFor) once it runs.
func checkHeadKey(kp nkeys.KeyPair) error {
	key, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("runner: head signing key: %w", err)
	}
	d := events.HeadDigest("probe", 1, "probe", key)
	sig, err := kp.Sign(d[:])
	if err == nil {
		err = kp.Verify(d[:], sig)
	}
	if err != nil {
		return fmt.Errorf("runner: head signing key %s cannot sign: %w", key, err)
	}
	return nil
}

// headSigned is the runner's signed head of run at version, whose event
// hashes to hash (events.HeadDigest, signed with the runner's head key,
// which it must hold); end says the run has ended there.
func (r *Runner) headSigned(run string, version uint64, hash string, end bool) (events.HeadSigned, error) {
	key, err := r.headKey.PublicKey()
	if err != nil {
		return events.HeadSigned{}, err
	}
	d := events.HeadDigest(run, version, hash, key)
	sig, err := r.headKey.Sign(d[:])
	if err != nil {
		return events.HeadSigned{}, err
	}
	return events.HeadSigned{Version: version, Hash: hash, Key: key, Signer: r.id, Signature: base64.RawURLEncoding.EncodeToString(sig), End: end}, nil
}
