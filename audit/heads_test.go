package audit_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
)

func headKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// signedRun is paymentRun with a signed end head by kp after run_finished.
func signedRun(t *testing.T, kp nkeys.KeyPair) []events.Envelope {
	t.Helper()
	evs := append(paymentRun(), events.HeadSigned{})
	return audittest.Resign(chain(t, "pay-42", evs), kp, "runner-1")
}

// TestSignedHeadChecks (docs/security.md, "Signed heads"): the untouched
// signed history verifies with its key trusted; a signature whose key was
// swapped for another, a head that names another version, an unsigned
// history under --trust and a head named past the end each fail with their
// kind at the event at fault.
func TestSignedHeadChecks(t *testing.T) {
	kp, pub := headKey(t)
	_, other := headKey(t)
	envs := signedRun(t, kp)
	last := envs[len(envs)-1]
	if rep := audit.Verify(envs, audit.WithTrust(pub)); !rep.OK() || rep.SignedThrough != last.Version || len(rep.Heads) != 1 || !rep.Heads[0].Trusted {
		t.Fatalf("signed history: %+v %+v", rep.Problem, rep.Heads)
	}
	edit := func(f func(*events.HeadSigned)) []events.Envelope {
		out := append([]events.Envelope(nil), envs...)
		ev, err := out[len(out)-1].Event()
		if err != nil {
			t.Fatal(err)
		}
		hs := ev.(events.HeadSigned)
		f(&hs)
		out[len(out)-1].Payload, _ = json.Marshal(hs)
		return out
	}
	for _, tc := range []struct {
		name    string
		envs    []events.Envelope
		opts    []audit.Option
		kind    string
		version uint64
	}{
		{"key swapped", edit(func(h *events.HeadSigned) { h.Key = other }), []audit.Option{audit.WithTrust(other)}, audit.KindSignature, last.Version},
		{"another version signed", edit(func(h *events.HeadSigned) { h.Version-- }), nil, audit.KindSignature, last.Version},
		{"unsigned under trust", chain(t, "pay-42", paymentRun()), []audit.Option{audit.WithTrust(pub)}, audit.KindUnsigned, last.Version - 1},
		{"head named past the end", envs, []audit.Option{audit.WithHeadAt(last.Version+1, last.Hash())}, audit.KindHead, last.Version},
	} {
		rep := audit.Verify(tc.envs, tc.opts...)
		if rep.OK() || rep.Problem.Kind != tc.kind || rep.Problem.Version != tc.version {
			t.Errorf("%s: %+v, want %s at version %d", tc.name, rep.Problem, tc.kind, tc.version)
		}
	}
	for _, bad := range []string{"", "12", "x:ab", "0:ab", "3:"} {
		if _, _, err := audit.ParseHead(bad); err == nil {
			t.Errorf("ParseHead(%q) accepted", bad)
		}
	}
	if v, h, err := audit.ParseHead("12:ABcd"); err != nil || v != 12 || h != "abcd" {
		t.Errorf("ParseHead(12:ABcd) = %d %q %v", v, h, err)
	}
}

// TestSignedHeadsEndTheExport (docs/security.md, "Signed heads"): with
// WithTrust, an export must end with a trusted signed head over a finished
// run. A finished run cut back to an earlier signed head, and that cut with
// a forged unsigned event after the head, fail as "unsigned" at their last
// event; WithUnfinished (a live run's export) accepts both, and a head
// named with WithHeadAt that is the export's last event stands in for the
// end head.
func TestSignedHeadsEndTheExport(t *testing.T) {
	kp, pub := headKey(t)
	run := paymentRun()
	// A head after attempt_reported (event 8) and the end head.
	evs := append(append(append([]events.Event{}, run[:8]...), events.HeadSigned{}), run[8:]...)
	evs = append(evs, events.HeadSigned{})
	envs := audittest.Resign(chain(t, "pay-42", evs), kp, "runner-1")
	if rep := audit.Verify(envs, audit.WithTrust(pub)); !rep.OK() {
		t.Fatalf("untouched: %+v", rep.Problem)
	}
	cut := envs[:9]
	forged := audittest.Rechain(append(append([]events.Envelope(nil), cut...), chain(t, "pay-42", append(append([]events.Event{}, evs[:9]...), events.ModelRequested{Turn: 2, Incarnation: 1, Why: events.TurnToolResults}))[9]))
	for _, tc := range []struct {
		name string
		envs []events.Envelope
	}{
		{"cut at the middle head", cut},
		{"cut at the middle head, forged unsigned event after it", forged},
	} {
		rep := audit.Verify(tc.envs, audit.WithTrust(pub))
		if rep.OK() || rep.Problem.Kind != audit.KindUnsigned || rep.Problem.Version != uint64(len(tc.envs)) {
			t.Errorf("%s with trust: %+v, want unsigned at version %d", tc.name, rep.Problem, len(tc.envs))
		}
		if rep := audit.Verify(tc.envs, audit.WithTrust(pub), audit.WithUnfinished()); !rep.OK() {
			t.Errorf("%s with trust, unfinished: %+v", tc.name, rep.Problem)
		}
		lastEnv := tc.envs[len(tc.envs)-1]
		if rep := audit.Verify(tc.envs, audit.WithTrust(pub), audit.WithHeadAt(lastEnv.Version, lastEnv.Hash())); !rep.OK() {
			t.Errorf("%s with trust and its last head named: %+v", tc.name, rep.Problem)
		}
	}
}

// TestNamedHeadIsTheLast (docs/cli.md, audit verify --head): events after
// the head named with WithHeadAt are vouched for by nobody, so they fail as
// "head" at the first of them unless WithUnfinished accepts them; a head
// named at version 0 fails as "head" too.
func TestNamedHeadIsTheLast(t *testing.T) {
	envs := chain(t, "pay-42", paymentRun())
	named := envs[len(envs)-3]
	rep := audit.Verify(envs, audit.WithHeadAt(named.Version, named.Hash()))
	if rep.OK() || rep.Problem.Kind != audit.KindHead || rep.Problem.Version != named.Version+1 {
		t.Errorf("events after the named head: %+v, want head at version %d", rep.Problem, named.Version+1)
	}
	if rep := audit.Verify(envs, audit.WithHeadAt(named.Version, named.Hash()), audit.WithUnfinished()); !rep.OK() {
		t.Errorf("events after the named head, unfinished: %+v", rep.Problem)
	}
	if rep := audit.Verify(envs, audit.WithHeadAt(0, "ab")); rep.OK() || rep.Problem.Kind != audit.KindHead {
		t.Errorf("head 0 named: %+v, want head", rep.Problem)
	}
}
