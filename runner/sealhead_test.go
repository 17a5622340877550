package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// logMessages returns run's log messages in order, each as the envelopes
// it holds: one message per append (docs/protocol/10-log.md).
func logMessages(t *testing.T, h *harness, run string) [][]events.Envelope {
	t.Helper()
	c := ctx(t)
	st, err := h.srv.JS.Stream(c, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(c)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]events.Envelope
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(c, seq)
		if err != nil || m.Subject != eventlog.Subject(run) {
			continue // another run's, or deleted
		}
		var body struct {
			Events []events.Envelope `json:"events"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatalf("message %d of run %s: %v", seq, run, err)
		}
		out = append(out, body.Events)
	}
	return out
}

// messageOf returns the message of msgs that holds the last event of type
// name, or nil.
func messageOf(msgs [][]events.Envelope, name events.Name) []events.Envelope {
	var found []events.Envelope
	for _, m := range msgs {
		for _, env := range m {
			if env.Type == name {
				found = m
			}
		}
	}
	return found
}

// checkSealed fails unless every head_signed of msgs is the last event of
// a message that also holds the event it signs, signed by key: the
// decision and its signature are one append (docs/adr/0044).
func checkSealed(t *testing.T, msgs [][]events.Envelope, key string) {
	t.Helper()
	for _, m := range msgs {
		for i, env := range m {
			if env.Type != events.NameHeadSigned {
				continue
			}
			ev, err := env.Event()
			if err != nil {
				t.Fatal(err)
			}
			hs := ev.(events.HeadSigned)
			if i == 0 || i != len(m)-1 || hs.Version != m[i-1].Version || hs.Key != key {
				t.Fatalf("head_signed at %d (over %d, key %s) is event %d of a message of %d: want it the last event of the message holding the event it signs, by %s", env.Version, hs.Version, hs.Key, i+1, len(m), key)
			}
		}
	}
}

// sealEnds fails unless msg, the message holding a decision that owes a
// signature, ends with the signed head over the decision, and returns it.
func sealEnds(t *testing.T, msg []events.Envelope, what string) events.HeadSigned {
	t.Helper()
	if len(msg) < 2 || msg[len(msg)-1].Type != events.NameHeadSigned {
		types := make([]events.Name, len(msg))
		for i, env := range msg {
			types[i] = env.Type
		}
		t.Fatalf("the message holding %s holds %v: want it to end with the head_signed over it (one append)", what, types)
	}
	ev, err := msg[len(msg)-1].Event()
	if err != nil {
		t.Fatal(err)
	}
	return ev.(events.HeadSigned)
}

// TestSignedHeadsSealTheDecisionsTheySign (docs/adr/0044;
// docs/adr/0026-signed-heads.md): with a head key, a person's approval
// and the run's end are each ONE append — the log message holding
// approval_answered ends with the head_signed over it, and the message
// holding run_finished ends with the signed end head and is the run's last
// message: no head_signed is appended on its own. The history verifies
// with --trust, and the last message alone reads as a finished run's
// signed end (runner/rebuild.go).
func TestSignedHeadsSealTheDecisionsTheySign(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	runnerKey, runnerPub := userKey(t, 21)
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithHeadKey(runnerKey))
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "se1", Agent: "desk", Input: "pay"})
	s := h.waitStatus("se1", aggregate.StatusSuspended)
	act := s.Actions()[0]
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "yes", Run: "se1", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "se1")
	msgs := logMessages(t, h, "se1")
	checkSealed(t, msgs, runnerPub)
	answered := messageOf(msgs, events.NameApprovalAnswered)
	if hs := sealEnds(t, answered, "the approval"); hs.End {
		t.Errorf("the approval's signed head says end: the run had not ended")
	}
	last := msgs[len(msgs)-1]
	if hs := sealEnds(t, last, "the run's end"); !hs.End || messageOf(msgs, events.NameRunFinished)[0].ID != last[0].ID {
		t.Fatalf("the run's last message: end %v, holds run_finished %v; want the sealed end", hs.End, messageOf(msgs, events.NameRunFinished)[0].ID == last[0].ID)
	}
	raw, _ := json.Marshal(map[string]any{"schema": 1, "events": last})
	if fin, signed := runner.EndsFinished(raw); !fin || !signed {
		t.Errorf("the sealed end's message reads finished %v, signed %v", fin, signed)
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() || len(rep.Heads) != 2 || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, heads %+v, signed through %d of %d", rep.Problem, rep.Heads, rep.SignedThrough, envs[len(envs)-1].Version)
	}
}

// TestSemantics8_ASealedDecisionLeavingARunIdleNeedsNoEntry
// (docs/adr/0044; docs/semantics.md §8): with a head key, a rejection that
// leaves the run idle (it still waits for another approval) is appended
// sealed with its signed head, so nothing is owed once it lands and the
// run rests without a weft_drivers entry, as an idle run does without a
// key: none is put for it (an unsealed one keeps its entry until signed,
// TestSemantics8_APersonsDecisionLeavingARunIdleKeepsItsEntryUntilSigned).
func TestSemantics8_ASealedDecisionLeavingARunIdleNeedsNoEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, pubA := userKey(t, 22)
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := runner.DriverKey("is1", runner.DefaultPartitions)
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithHeadKey(keyA))
	h.startServed(c, api.StartRequest{Run: "is1", Agent: "desk", Input: "pay twice"})
	s := h.waitFor("is1", "two approvals asked", func(s aggregate.State) bool {
		return len(aggregate.Status(s).Approvals) == 2
	})
	// The idle run is evicted with its entry (nothing owed).
	waitNoEntry := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := kv.Get(c, key); err != nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the idle run's weft_drivers entry is still there", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitNoEntry("waiting for two approvals")
	w, err := kv.Watch(c, key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Reject(c, api.RejectRequest{CommandID: "no", Run: "is1", Action: act.ID, Revision: act.Request.Revision, Reason: "too much", Approver: "desk", Credential: "bob"}); err != nil {
		t.Fatal(err)
	}
	if s := h.state("is1"); !aggregate.Idle(s) || s.HeadBehind() {
		t.Fatalf("after the rejection: idle %v, head behind %v; want an idle run owing nothing", aggregate.Idle(s), s.HeadBehind())
	}
	msgs := logMessages(t, h, "is1")
	checkSealed(t, msgs, pubA)
	sealEnds(t, messageOf(msgs, events.NameApprovalAnswered), "the rejection")
	quiet := time.After(200 * time.Millisecond) // for a write in flight to arrive
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				t.Fatalf("the run's weft_drivers entry was written (%s, %q) for a sealed rejection that leaves it idle", e.Operation(), e.Value())
			}
		case <-quiet:
			return
		}
	}
}

// TestSemantics8_ATakeoverSealsTheHeadItsDriverLeftUnsigned (docs/adr/0044;
// docs/semantics.md §8; docs/adr/0026-signed-heads.md): a log written
// without seals — runner-a paused and resumed the run for a person and
// died before it signed the resume (as a runner that signs after its
// decisions could), its entry left. runner-b, with a head key, takes the
// run over: its takeover's own message ends with the head_signed that
// covers the resume (the takeover is sealed: the head was behind before
// it), the run's end is sealed too, and the history verifies with --trust.
func TestSemantics8_ATakeoverSealsTheHeadItsDriverLeftUnsigned(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyB, pubB := userKey(t, 23)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	var s aggregate.State
	hd := appendDecided(t, h, "tk1", &s, aggregate.Start{Run: "tk1", Agent: desk.Ref(), Input: "close the books", Limits: desk.Limits(), Runner: "runner-a"})
	hd = appendDecidedAt(t, h, "tk1", &s, hd, aggregate.Pause{By: "alice", Reason: "check the ledger"})
	hd = appendDecidedAt(t, h, "tk1", &s, hd, aggregate.Resume{By: "alice", Reason: "ledger checked"})
	if !s.HeadBehind() {
		t.Fatal("crafted history: no signature owed")
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, runner.DriverKey("tk1", runner.DefaultPartitions), []byte("runner-a")); err != nil {
		t.Fatal(err)
	}

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "tk1")
	msgs := logMessages(t, h, "tk1")
	checkSealed(t, msgs, pubB)
	recovered := messageOf(msgs, events.NameRunRecovered)
	if hs := sealEnds(t, recovered, "runner-b's takeover"); hs.Version <= hd.Version {
		t.Fatalf("the takeover's signed head is over %d: want it over the takeover, after the resume at %d", hs.Version, hd.Version)
	}
	sealEnds(t, msgs[len(msgs)-1], "the run's end")
	if rep := audit.Verify(envs, audit.WithTrust(pubB)); !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
}

// brokenKey is a head key whose Sign fails once broken is set: a key
// that stopped signing after its runner started (runner.New refuses one
// that cannot sign at all).
type brokenKey struct {
	nkeys.KeyPair
	broken atomic.Bool
}

func (k *brokenKey) Sign(b []byte) ([]byte, error) {
	if k.broken.Load() {
		return nil, errors.New("cannot sign")
	}
	return k.KeyPair.Sign(b)
}

// TestSemantics8_ASealThatCannotBeSignedFailsTheDecision (docs/adr/0044;
// docs/semantics.md §8): a person cancels an idle run (evicted with its
// weft_drivers entry, nothing owed) while runner-a's head key cannot
// sign. The cancel is refused unavailable and nothing is recorded — not
// the run's end appended unsealed, which would owe a signature that no
// entry leads any runner to (keyBeforeAppend puts none for a sealed
// decision) — and the runner knows it: it does not read the run again as
// after an append of unknown outcome (docs/protocol.md, unavailable).
// Once the key signs again, the same command is applied, its end sealed,
// and the history verifies with --trust.
func TestSemantics8_ASealThatCannotBeSignedFailsTheDecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	kp, pub := userKey(t, 24)
	key := &brokenKey{KeyPair: kp}
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	var unknown atomic.Int32 // appends of sf1 whose outcome the runner did not know
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithHeadKey(key), runner.WithHook(func(event string, _ int, run string) {
		if event == "append-unknown" && run == "sf1" {
			unknown.Add(1)
		}
	}))
	h.startServed(c, api.StartRequest{Run: "sf1", Agent: "desk", Input: "pay"})
	h.waitStatus("sf1", aggregate.StatusSuspended)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := kv.Get(c, runner.DriverKey("sf1", runner.DefaultPartitions)); err != nil {
			break // the idle run rests without an entry
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle run's weft_drivers entry is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := logMessages(t, h, "sf1")

	key.broken.Store(true)
	cancel := api.CancelRequest{CommandID: "stop", Run: "sf1", By: "alice", Reason: "wrong payee"}
	if _, err := h.client.Cancel(c, cancel); weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("cancel with a head key that cannot sign: %v; want unavailable, nothing recorded", err)
	}
	s := h.state("sf1")
	if _, fin := s.Finished(); fin || s.HeadBehind() {
		t.Fatalf("after the refused cancel: finished %v, head behind %v; want nothing recorded, nothing owed", fin, s.HeadBehind())
	}
	if after := logMessages(t, h, "sf1"); len(after) != len(before) {
		t.Fatalf("the refused cancel left %d messages, %d before: want none appended", len(after), len(before))
	}
	if n := unknown.Load(); n != 0 {
		t.Fatalf("the refused cancel's append was taken for one of unknown outcome %d time(s) (the run read again): nothing was sent", n)
	}

	key.broken.Store(false)
	if _, err := h.client.Cancel(c, cancel); err != nil {
		t.Fatalf("the same cancel once the key signs: %v", err)
	}
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "sf1")
	msgs := logMessages(t, h, "sf1")
	checkSealed(t, msgs, pub)
	if hs := sealEnds(t, msgs[len(msgs)-1], "the cancel's end"); !hs.End {
		t.Fatal("the cancel's signed head does not say end")
	}
	if rep := audit.Verify(envs, audit.WithTrust(pub)); !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
}

// TestNewRefusesAHeadKeyThatCannotSign (docs/adr/0044): a runner whose
// head key cannot sign does not start, rather than refuse every decision
// that owes a signed head.
func TestNewRefusesAHeadKeyThatCannotSign(t *testing.T) {
	kp, _ := userKey(t, 25)
	key := &brokenKey{KeyPair: kp}
	key.broken.Store(true)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	if _, err := runner.New(nil, nil, []*agent.Agent{desk}, runner.WithHeadKey(key)); err == nil || !strings.Contains(err.Error(), "cannot sign") {
		t.Fatalf("New with a head key that cannot sign: %v; want refused", err)
	}
}
