package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// TestSecurityWhoDidIt_AuditChecksWhoVoided (docs/security.md, "Who did
// it"): a repair's void record signed by its repairer reads verified, with
// the key; one whose reason or sequence was edited afterwards, or that
// says it is verified without its proof, is a proof problem; a typed name
// reads unverified and is no problem, with people named or not.
func TestSecurityWhoDidIt_AuditChecksWhoVoided(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	sha := strings.Repeat("ab", 32)
	p, err := proof.NewCommand(proof.VoidSubject("v-1", 7, sha, "junk"), pub, t0.Add(time.Minute))
	if err == nil {
		p, err = proof.SignCommand(p, kp.Sign)
	}
	if err != nil {
		t.Fatal(err)
	}
	signed := eventlog.VoidRecord{At: 9, Void: eventlog.Void{Seq: 7, SHA256: sha, Bytes: 3, Reason: "junk", By: "alice",
		Identity: events.Identity{Verified: true, Key: pub}, Proof: &p, Recorded: t0}}
	who, prob := audit.CheckVoid("v-1", signed, audit.WithPeople(map[string][]string{pub: {"alice"}}))
	if prob != nil || !who.Verified || who.Key != pub {
		t.Fatalf("signed void: %+v %+v; want verified by %s", who, prob, pub)
	}
	if who, prob := audit.CheckVoid("v-1", signed, audit.WithPeople(map[string][]string{pub: {"alice@bank"}})); prob != nil || who.Named != "alice@bank" ||
		who.Describe() != "by alice@bank (verified, key "+pub+`, a person's key you trust; typed as "alice")` {
		t.Fatalf("signed void, the key named otherwise than typed: %q %+v; want the auditor's name, the typed one as typed, no problem", who.Describe(), prob)
	}
	if who, _ := audit.CheckVoid("v-1", signed); who.Describe() != "with a proof signed by key "+pub+` (the name "alice" is typed; not checked against people's keys: give --people)` {
		t.Fatalf("signed void, no people named: %q", who.Describe())
	}
	typed := eventlog.VoidRecord{At: 9, Void: eventlog.Void{Seq: 7, SHA256: sha, Reason: "junk", By: "bob", Recorded: t0}}
	if who, prob := audit.CheckVoid("v-1", typed, audit.WithPeople(nil)); prob != nil || who.Verified || who.Describe() != "by bob (unverified)" {
		t.Fatalf("typed void: %+v %+v; want bob unverified", who, prob)
	}
	edit := func(f func(*eventlog.VoidRecord)) eventlog.VoidRecord {
		v := signed
		f(&v)
		return v
	}
	for _, c := range []struct {
		name string
		v    eventlog.VoidRecord
		want string
	}{
		{"reason edited", edit(func(v *eventlog.VoidRecord) { v.Reason = "routine" }), proof.ReasonOtherReason},
		{"sequence edited", edit(func(v *eventlog.VoidRecord) { v.Seq = 8 }), proof.ReasonOtherContent},
		{"proof removed", edit(func(v *eventlog.VoidRecord) { v.Proof = nil }), "no signed proof"},
	} {
		if _, prob := audit.CheckVoid("v-1", c.v); prob == nil || prob.Kind != audit.KindProof || !strings.Contains(prob.Message, c.want) {
			t.Errorf("%s: %+v; want proof saying %q", c.name, prob, c.want)
		}
	}
}
