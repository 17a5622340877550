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
