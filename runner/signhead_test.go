package runner_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// TestSignedHeadsCatchARewrittenHistory (docs/security.md, "Signed heads";
// docs/adr/0026-signed-heads.md): a runner with a head key signs the head
// after the person's answer and at the run's end; the history verifies
// against that key (--trust) and against its head from the log (--head);
// an edit with the hash chain recomputed — the reviewer renamed, the
// signed proof removed —, the last events dropped, or the rewrite
// re-signed with a stranger's key each fail, naming the event.
func TestSignedHeadsCatchARewrittenHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	alice, alicePub := userKey(t, 1)
	runnerKey, runnerPub := userKey(t, 7)
	mallory, malloryPub := userKey(t, 3)
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	ag, err := agent.New("desk", m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithApprovers(
		approvers.Signed("keys", []approvers.Key{{Public: alicePub, Reviewer: "alice@bank", Requirements: []string{"finance"}}}, approvers.WithLifetime(5*time.Minute)),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h.startRunner([]*agent.Agent{ag}, runner.WithID("runner-a"), runner.WithHeadKey(runnerKey))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "sh", Agent: "desk", Input: "pay"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("sh", "an approval request", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	a, _ := s.Action(aggregate.Status(s).Approvals[0])
	p := signFor(t, alice, s, a, events.AnswerApprove, time.Now().Add(time.Minute), nil)
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "ok", Run: "sh", Action: a.ID, Revision: a.Request.Revision, Approver: "keys", Proof: p}); err != nil {
		t.Fatal(err)
	}
	envs, head := audittest.WaitEndHead(t, h.srv.Log, "sh")

	// The end head's log message alone tells the driver index rebuild
	// that the run finished (runner/rebuild.go), so it is not loaded.
	st, err := h.srv.JS.Stream(c, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	lastMsg, err := st.GetLastMsgForSubject(c, eventlog.Subject("sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fin, signed := runner.EndsFinished(lastMsg.Data); !fin || !signed {
		t.Errorf("the end head's message does not read as a finished run's signed end (finished %v, signed %v): %s", fin, signed, lastMsg.Data)
	}

	// Signed: after the answer's decision (it covers the answer), and
	// last, after run_finished.
	var signed []uint64
	var answered uint64
	for _, env := range envs {
		switch env.Type {
		case events.NameHeadSigned:
			signed = append(signed, env.Version)
		case events.NameApprovalAnswered:
			answered = env.Version
		}
	}
	if len(signed) == 0 || answered == 0 || signed[0] <= answered {
		t.Fatalf("signed heads at %v, answer at %d: want a signed head covering the answer", signed, answered)
	}
	last := envs[len(envs)-1]
	if len(signed) != 2 || last.Type != events.NameHeadSigned || envs[len(envs)-2].Type != events.NameRunFinished {
		t.Fatalf("signed heads at %v, last events %s, %s: want one after the answer and one after run_finished, last", signed, envs[len(envs)-2].Type, last.Type)
	}

	// Untouched: verifies with the runner's key, and with the log's head.
	rep := audit.Verify(envs, audit.WithTrust(runnerPub))
	if !rep.OK() || len(rep.Heads) != 2 || !rep.Heads[0].Trusted || rep.Heads[1].Signer != "runner-a" || rep.SignedThrough != last.Version {
		t.Fatalf("untouched history with --trust: %+v %+v through %d", rep.Problem, rep.Heads, rep.SignedThrough)
	}
	if rep := audit.Verify(envs, audit.WithHeadAt(head.Version, head.Hash)); !rep.OK() {
		t.Fatalf("untouched history with --head: %+v", rep.Problem)
	}

	renamed, n := audittest.Replace(envs, events.NameApprovalAnswered, `"reviewer":"alice@bank"`, `"reviewer":"mallory"`)
	noProof := audittest.Rechain(withoutProof(t, envs))
	if n != 1 {
		t.Fatalf("renamed %d answers, want 1", n)
	}
	for _, tc := range []struct {
		name    string
		envs    []events.Envelope
		opts    []audit.Option
		kind    string
		version uint64
	}{
		{"reviewer renamed, chain recomputed", renamed, []audit.Option{audit.WithTrust(runnerPub)}, audit.KindSignature, signed[0]},
		{"proof removed, chain recomputed", noProof, []audit.Option{audit.WithTrust(runnerPub)}, audit.KindSignature, signed[0]},
		{"end head dropped", envs[:len(envs)-1], []audit.Option{audit.WithTrust(runnerPub)}, audit.KindUnsigned, last.Version - 1},
		{"run end and its head dropped, head named", envs[:len(envs)-2], []audit.Option{audit.WithTrust(runnerPub), audit.WithHeadAt(head.Version, head.Hash)}, audit.KindHead, last.Version - 2},
		{"renamed with the log's head named", renamed, []audit.Option{audit.WithHeadAt(head.Version, head.Hash)}, audit.KindHead, head.Version},
		{"rewrite re-signed by a stranger", audittest.Resign(renamed, mallory, "runner-a"), []audit.Option{audit.WithTrust(runnerPub)}, audit.KindUntrusted, signed[0]},
	} {
		rep := audit.Verify(tc.envs, tc.opts...)
		if rep.OK() || rep.Problem.Kind != tc.kind || rep.Problem.Version != tc.version {
			t.Errorf("%s: %+v, want %s at version %d", tc.name, rep.Problem, tc.kind, tc.version)
		}
	}
	// The stranger's re-signed rewrite is self-consistent: it verifies
	// when its own key is trusted, and names mallory — which is why the
	// auditor must obtain the runner's key independently.
	if rep := audit.Verify(audittest.Resign(renamed, mallory, "runner-a"), audit.WithTrust(malloryPub)); !rep.OK() {
		t.Fatalf("re-signed rewrite with the stranger's key trusted: %+v", rep.Problem)
	}
}

// withoutProof returns envs with the proof of their approval_answered
// removed (chain not recomputed).
func withoutProof(t *testing.T, envs []events.Envelope) []events.Envelope {
	t.Helper()
	out := make([]events.Envelope, len(envs))
	copy(out, envs)
	for i, env := range out {
		if env.Type != events.NameApprovalAnswered {
			continue
		}
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		ans := ev.(events.ApprovalAnswered)
		if ans.Proof == nil {
			t.Fatal("the answer has no proof to remove")
		}
		ans.Proof = nil
		e, err := events.Encode(ans)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Payload = e.Payload
		return out
	}
	t.Fatal("no approval_answered")
	return nil
}

// TestSignedHeadsSignADecisionWhoseAckWasLost (docs/adr/0026-signed-heads.md,
// "Consequences"): a person's approval whose append landed but whose
// acknowledgement was lost is found in the log again (resync); its head is
// signed then, as after an acknowledged append, not left to the run's end.
func TestSignedHeadsSignADecisionWhoseAckWasLost(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	runnerKey, runnerPub := userKey(t, 7)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	js := &lossyJS{JetStream: h.srv.JS}
	h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithHeadKey(runnerKey))

	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "shl", Agent: "desk", Input: "x"})
	s := h.waitStatus("shl", aggregate.StatusSuspended)
	act := s.Actions()[0]
	js.armed.Store(true)
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: "shl", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatalf("approve whose decision landed with a lost ack: %v", err)
	}
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "shl")
	var answered uint64
	var signed []uint64
	for _, env := range envs {
		switch env.Type {
		case events.NameApprovalAnswered:
			answered = env.Version
		case events.NameHeadSigned:
			signed = append(signed, env.Version)
		}
	}
	if len(signed) != 2 || signed[0] <= answered {
		t.Errorf("signed heads at %v, answer at %d: want one covering the answer whose ack was lost, and the end head", signed, answered)
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() {
		t.Errorf("verify: %+v", rep.Problem)
	}
}

// TestSemantics8_AFinishedRunWhoseDriverDiedBeforeSigningIsSignedByTheNextRunner
// (docs/semantics.md §8; docs/adr/0026-signed-heads.md): a runner that died
// between the append of run_finished and the signature of the run's end
// left the run finished, unsigned, and its weft_drivers entry in place.
// The runner that wakes the run from that entry signs the end head with
// its key before it removes the entry, so the history verifies (--trust)
// instead of reading unsigned through no one's fault.
func TestSemantics8_AFinishedRunWhoseDriverDiedBeforeSigningIsSignedByTheNextRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	runnerKey, runnerPub := userKey(t, 8)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())

	// The dead runner's history: started, answered, finished — and no
	// head_signed after run_finished. Its driver entry is still there.
	var s aggregate.State
	hd := appendDecided(t, h, "es1", &s, aggregate.Start{Run: "es1", Agent: desk.Ref(), Input: "close the books", Limits: desk.Limits(), Runner: "ghost"})
	appendDecidedAt(t, h, "es1", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyFinalAnswer, Turn: model.Message{Role: model.RoleAssistant, Text: "done"}}))
	if _, fin := s.Finished(); !fin {
		t.Fatalf("crafted history: run not finished (%+v)", aggregate.Status(s))
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := runner.DriverKey("es1", runner.DefaultPartitions)
	if _, err := kv.Put(c, key, []byte("ghost")); err != nil {
		t.Fatal(err)
	}

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(runnerKey))
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "es1")
	ev, err := envs[len(envs)-1].Event()
	if err != nil {
		t.Fatal(err)
	}
	if hs := ev.(events.HeadSigned); !hs.End || hs.Key != runnerPub || hs.Signer != "runner-b" {
		t.Fatalf("last event %+v: want the end head signed by runner-b's key", hs)
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
	// And the entry is removed, as before: nothing stays behind.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := kv.Get(c, key); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the finished run's weft_drivers entry was never removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unsignedJS is the runner's real JetStream, except that the first
// append of a head_signed fails before anything is published (a runner
// that appends its signed heads after their decisions,
// runner.WithoutSeal).
type unsignedJS struct {
	jetstream.JetStream
	failed atomic.Bool
}

func (u *unsignedJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "weft.ev.") && bytes.Contains(m.Data, []byte(`"type":"head_signed"`)) && u.failed.CompareAndSwap(false, true) {
		return nil, errors.Join(errors.New("the connection dropped before the append was sent"), nats.ErrConnectionClosed)
	}
	return u.JetStream.PublishMsg(ctx, m, opts...)
}

// TestSemantics8_AFinishedRunWhoseEndHeadFailedIsSignedOnItsWake
// (docs/semantics.md §8: pending work is retried, never dropped;
// docs/adr/0026-signed-heads.md): when the append of the end head fails
// after run_finished landed, the runner does not remove the run's
// weft_drivers entry as if the run were done with: the run is woken again
// and its end signed then.
func TestSemantics8_AFinishedRunWhoseEndHeadFailedIsSignedOnItsWake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runnerKey, runnerPub := userKey(t, 9)
	js := &unsignedJS{JetStream: h.srv.JS}
	h.runOn(h.srv.Connect(), js, []*agent.Agent{build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())}, runner.WithID("runner-c"), runner.WithLease(2*time.Second), runner.WithHeadKey(runnerKey), runner.WithoutSeal())
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "es2", Agent: "desk", Input: "close the books"})
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "es2")
	if !js.failed.Load() {
		t.Fatal("no head_signed append failed")
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
}

// TestSignedHeadsSignTheEndOfARunTakenOver (docs/adr/0026-signed-heads.md):
// the run of a runner gone, waiting for an approval, is cancelled through
// another runner, which holds a head key: the cancel, recorded with the
// run's takeover, and the run's end are signed by that runner.
func TestSignedHeadsSignTheEndOfARunTakenOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	runnerKey, runnerPub := userKey(t, 10)
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	_, stopA := h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-a"))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "es3", Agent: "desk", Input: "pay"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("es3", aggregate.StatusSuspended)
	stopA()
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(runnerKey))
	if _, err := retryingCancel(c, h, "es3"); err != nil {
		t.Fatal(err)
	}
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "es3")
	var cancelled, recovered uint64
	var signed []uint64
	for _, env := range envs {
		switch env.Type {
		case events.NameCancelRequested:
			cancelled = env.Version
		case events.NameRunRecovered:
			recovered = env.Version
		case events.NameHeadSigned:
			signed = append(signed, env.Version)
		}
	}
	if recovered == 0 || recovered > cancelled {
		t.Fatalf("run_recovered at %d, cancel at %d: want the takeover recorded with the cancel", recovered, cancelled)
	}
	if cancelled == 0 || len(signed) == 0 || signed[0] <= cancelled {
		t.Fatalf("cancel at %d, signed heads at %v: want a signed head covering the cancel", cancelled, signed)
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() || rep.Heads[len(rep.Heads)-1].Signer != "runner-b" {
		t.Fatalf("verify with --trust: %+v %+v", rep.Problem, rep.Heads)
	}
}

// retryingCancel cancels run, sent again while no runner serves it yet.
func retryingCancel(c context.Context, h *harness, run string) (api.Reply, error) {
	for {
		r, err := h.client.Cancel(c, api.CancelRequest{Run: run, CommandID: "cancel-" + run})
		if err == nil || c.Err() != nil || (weft.ErrorCode(err) != weft.CodeUnavailable && weft.ErrorCode(err) != weft.CodeRunnerBusy) {
			return r, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// appendHead appends, as the runner signer would have, a head_signed over
// head signed with kp, and folds it into s.
func appendHead(t *testing.T, h *harness, run string, s *aggregate.State, head eventlog.Head, kp nkeys.KeyPair, signer string) eventlog.Head {
	t.Helper()
	key, _ := kp.PublicKey()
	d := events.HeadDigest(run, head.Version, head.Hash, key)
	sig, err := kp.Sign(d[:])
	if err != nil {
		t.Fatal(err)
	}
	hs := events.HeadSigned{Version: head.Version, Hash: head.Hash, Key: key, Signer: signer, Signature: base64.RawURLEncoding.EncodeToString(sig)}
	envs, next, err := h.srv.Log.Append(context.Background(), run, head, time.Now(), hs)
	if err != nil {
		t.Fatal(err)
	}
	*s = aggregate.Evolve(*s, events.Recorded{Run: run, Version: envs[0].Version, At: envs[0].Recorded, Event: hs})
	return next
}

// TestSemantics8_ADecisionLeftUnsignedIsSignedByTheRunnerThatTakesOver
// (docs/semantics.md §8; docs/adr/0026-signed-heads.md): runner-a signed
// the head after a person paused the run, then died between the append
// of the resume and its signature, its weft_drivers entry left. The
// runner that takes the run over reads from the log that the last signed
// head is behind a person's decision and signs the head with its
// takeover — not only at the run's end —, and the finished run's export
// verifies with --trust naming both runners' keys.
func TestSemantics8_ADecisionLeftUnsignedIsSignedByTheRunnerThatTakesOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, pubA := userKey(t, 11)
	keyB, pubB := userKey(t, 12)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())

	// The dead runner's history: started, paused (signed), resumed — and
	// no head_signed after the resume. Its driver entry is still there.
	var s aggregate.State
	hd := appendDecided(t, h, "ut1", &s, aggregate.Start{Run: "ut1", Agent: desk.Ref(), Input: "close the books", Limits: desk.Limits(), Runner: "runner-a"})
	hd = appendDecidedAt(t, h, "ut1", &s, hd, aggregate.Pause{By: "alice", Reason: "check the ledger"})
	hd = appendHead(t, h, "ut1", &s, hd, keyA, "runner-a")
	hd = appendDecidedAt(t, h, "ut1", &s, hd, aggregate.Resume{By: "alice", Reason: "ledger checked"})
	resumed := hd.Version
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, runner.DriverKey("ut1", runner.DefaultPartitions), []byte("runner-a")); err != nil {
		t.Fatal(err)
	}

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "ut1")
	rep := audit.Verify(envs, audit.WithTrust(pubA, pubB))
	if !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust of both keys: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
	recovered, finished := versionOf(envs, events.NameRunRecovered), versionOf(envs, events.NameRunFinished)
	if recovered <= resumed {
		t.Fatalf("run_recovered at %d, the resume at %d: want runner-b's takeover after it", recovered, resumed)
	}
	// runner-b's first signed head: over its takeover, before the end.
	first := slices.IndexFunc(rep.Heads, func(hc audit.HeadCheck) bool { return hc.Key == pubB })
	if first < 0 || rep.Heads[first].Head < recovered || rep.Heads[first].Head >= finished {
		t.Fatalf("signed heads %+v (takeover at %d, end at %d): want one by runner-b over its takeover, covering the resume, before the run's end", rep.Heads, recovered, finished)
	}
	if rep.Heads[0].Key != pubA {
		t.Errorf("heads %+v: want the first signed by runner-a", rep.Heads)
	}
}

// headlessJS is the runner's real JetStream, except that every append of
// a head_signed fails before anything is published: a runner that appends
// its signed heads after their decisions (runner.WithoutSeal, as the
// release before docs/adr/0044) dies, as far as its signatures go,
// between each decision and its signature.
type headlessJS struct{ jetstream.JetStream }

func (u headlessJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "weft.ev.") && bytes.Contains(m.Data, []byte(`"type":"head_signed"`)) {
		return nil, errors.Join(errors.New("the runner died before its signature was sent"), nats.ErrConnectionClosed)
	}
	return u.JetStream.PublishMsg(ctx, m, opts...)
}

// TestSemantics8_AnIdleRunCancelledByARunnerThatDiesBeforeSigningIsSignedByTheNext
// (docs/semantics.md §8: pending work is retried, never dropped;
// docs/adr/0026-signed-heads.md): a run waiting for an approval (idle: no
// weft_drivers entry) is cancelled by runner-a, which never gets its end
// head appended and stops. The cancel put the run's entry before its
// append, so the runner that owns the partition next finds the finished
// run, signs its end, and the export verifies with --trust.
func TestSemantics8_AnIdleRunCancelledByARunnerThatDiesBeforeSigningIsSignedByTheNext(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, pubA := userKey(t, 13)
	keyB, pubB := userKey(t, 14)
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	nc := h.srv.Connect()
	ra, err := runner.New(nc, headlessJS{h.srv.JS}, []*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithLease(2*time.Second), runner.WithDrainWindow(time.Second), runner.WithHeadKey(keyA), runner.WithoutSeal())
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(actx) }()
	stopA := sync.OnceFunc(func() { cancelA(); <-done })
	t.Cleanup(stopA)
	h.startServed(c, api.StartRequest{Run: "ic1", Agent: "desk", Input: "pay"})
	h.waitStatus("ic1", aggregate.StatusSuspended)
	if _, err := retryingCancel(c, h, "ic1"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("ic1", aggregate.StatusFinished)
	stopA()

	// The finished run's entry outlives runner-a: the next owner finds it.
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(c, runner.DriverKey("ic1", runner.DefaultPartitions)); err != nil {
		t.Fatalf("the cancelled run's weft_drivers entry: %v; want it kept until its end is signed", err)
	}
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "ic1")
	rep := audit.Verify(envs, audit.WithTrust(pubA, pubB))
	if !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version || rep.Heads[len(rep.Heads)-1].Signer != "runner-b" {
		t.Fatalf("verify with --trust of both keys: %+v, signed through %d of %d, heads %+v", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version, rep.Heads)
	}
}

// TestSignedHeadsSignWhatIsAppendedAfterTheEnd (docs/adr/0026-signed-heads.md;
// the chaos check finished_run_not_signed found it): a worker's late
// report to a finished run is recorded refused after the end head; the
// runner signs the head after it too, so the finished run's history still
// ends with a signed head and verifies with --trust.
func TestSignedHeadsSignWhatIsAppendedAfterTheEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runnerKey, runnerPub := userKey(t, 15)
	h.startRunner([]*agent.Agent{build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())}, runner.WithHeadKey(runnerKey))
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "late1", Agent: "desk", Input: "close the books"})
	audittest.WaitEndHead(t, h.srv.Log, "late1")
	if _, err := h.client.Report(c, api.Report{Schema: 1, Run: "late1", Action: "9/none", Attempt: 1, Incarnation: 1, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{}`)}); err != nil {
		t.Logf("late report: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		envs, _, err := h.srv.Log.Load(c, "late1")
		if err != nil {
			t.Fatal(err)
		}
		refused := slices.IndexFunc(envs, func(env events.Envelope) bool { return env.Type == events.NameReportRefused })
		if refused >= 0 && envs[len(envs)-1].Type == events.NameHeadSigned && len(envs)-1 > refused {
			if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() {
				t.Fatalf("verify with --trust: %+v", rep.Problem)
			}
			return
		}
		if time.Now().After(deadline) {
			var types []events.Name
			for _, env := range envs {
				types = append(types, env.Type)
			}
			t.Fatalf("the log %v: want report_refused followed by a signed head", types)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// versionOf is the version of the last event of type name in envs (0: none).
func versionOf(envs []events.Envelope, name events.Name) uint64 {
	var v uint64
	for _, env := range envs {
		if env.Type == name {
			v = env.Version
		}
	}
	return v
}

// toggledHeadlessJS is headlessJS while off is set: the runner's appends
// of head_signed fail from then on, the rest goes through.
type toggledHeadlessJS struct {
	jetstream.JetStream
	off *atomic.Bool
}

func (u toggledHeadlessJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if u.off.Load() {
		return headlessJS{u.JetStream}.PublishMsg(ctx, m, opts...)
	}
	return u.JetStream.PublishMsg(ctx, m, opts...)
}

// TestSemantics8_AnAppendToAFinishedRunLeftUnsignedIsSignedByTheNext
// (docs/semantics.md §8: pending work is retried, never dropped;
// docs/adr/0026-signed-heads.md): runner-a finishes a run and signs its
// end; a worker's late report is then recorded refused after the end,
// and runner-a never gets the head after it signed (its signature
// appends fail) and stops. The run's weft_drivers entry was put before
// that append, so the runner that owns the partition next finds the
// finished run, signs its tail without taking it over (no run_recovered),
// deletes the entry, and the export verifies with --trust.
func TestSemantics8_AnAppendToAFinishedRunLeftUnsignedIsSignedByTheNext(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, pubA := userKey(t, 16)
	keyB, pubB := userKey(t, 17)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	var off atomic.Bool
	nc := h.srv.Connect()
	ra, err := runner.New(nc, toggledHeadlessJS{h.srv.JS, &off}, []*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithLease(2*time.Second), runner.WithDrainWindow(time.Second), runner.WithHeadKey(keyA), runner.WithoutSeal())
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(actx) }()
	stopA := sync.OnceFunc(func() { cancelA(); <-done })
	t.Cleanup(stopA)
	h.startServed(c, api.StartRequest{Run: "late2", Agent: "desk", Input: "close the books"})
	audittest.WaitEndHead(t, h.srv.Log, "late2")

	off.Store(true)
	if _, err := h.client.Report(c, api.Report{Schema: 1, Run: "late2", Action: "9/none", Attempt: 1, Incarnation: 1, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{}`)}); err != nil {
		t.Logf("late report: %v", err)
	}
	envs, _, err := h.srv.Log.Load(c, "late2")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(envs); n == 0 || envs[n-1].Type != events.NameReportRefused {
		t.Fatalf("the log ends with %v: want the late report refused, unsigned", envs[len(envs)-1].Type)
	}
	stopA()

	c = context.Background() // the wait below is bounded by its own deadline
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	deadline := time.Now().Add(30 * time.Second)
	for {
		envs, _, err = h.srv.Log.Load(c, "late2")
		if err != nil {
			t.Fatal(err)
		}
		if envs[len(envs)-1].Type == events.NameHeadSigned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log ends with %v: want runner-b's signed head after the late report", envs[len(envs)-1].Type)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep := audit.Verify(envs, audit.WithTrust(pubA, pubB))
	if !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version || rep.Heads[len(rep.Heads)-1].Signer != "runner-b" {
		t.Fatalf("verify with --trust of both keys: %+v, signed through %d of %d, heads %+v", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version, rep.Heads)
	}
	if v := versionOf(envs, events.NameRunRecovered); v != 0 {
		t.Fatalf("run_recovered at %d: a finished run is signed, never taken over", v)
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := kv.Get(c, runner.DriverKey("late2", runner.DefaultPartitions)); errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the finished run's weft_drivers entry is still there after its tail was signed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemantics8_AnAppendToAFinishedRunWhoseSignatureFailedIsSignedOnRetry
// (docs/semantics.md §8: pending work is retried, never dropped;
// docs/adr/0026-signed-heads.md): the head after a late report refused
// on a finished run cannot be appended while the store refuses it; the
// runner keeps the run's weft_drivers entry and wakes the run again, so
// once the store takes it the finished run's history ends signed by the
// same runner, and the entry is deleted.
func TestSemantics8_AnAppendToAFinishedRunWhoseSignatureFailedIsSignedOnRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, pubA := userKey(t, 18)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	var off atomic.Bool
	nc := h.srv.Connect()
	ra, err := runner.New(nc, toggledHeadlessJS{h.srv.JS, &off}, []*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithHeadKey(keyA), runner.WithoutSeal())
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(actx) }()
	t.Cleanup(func() { cancelA(); <-done })
	h.startServed(c, api.StartRequest{Run: "late3", Agent: "desk", Input: "close the books"})
	audittest.WaitEndHead(t, h.srv.Log, "late3")

	off.Store(true)
	if _, err := h.client.Report(c, api.Report{Schema: 1, Run: "late3", Action: "9/none", Attempt: 1, Incarnation: 1, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{}`)}); err != nil {
		t.Logf("late report: %v", err)
	}
	envs, _, err := h.srv.Log.Load(c, "late3")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(envs); n == 0 || envs[n-1].Type != events.NameReportRefused {
		t.Fatalf("the log ends with %v: want the late report refused, unsigned", envs[len(envs)-1].Type)
	}
	off.Store(false)

	c = context.Background() // the wait below is bounded by its own deadline
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		envs, _, err = h.srv.Log.Load(c, "late3")
		if err != nil {
			t.Fatal(err)
		}
		_, kerr := kv.Get(c, runner.DriverKey("late3", runner.DefaultPartitions))
		if envs[len(envs)-1].Type == events.NameHeadSigned && errors.Is(kerr, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log ends with %v, the entry's read: %v: want a signed head after the late report, the entry deleted", envs[len(envs)-1].Type, kerr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep := audit.Verify(envs, audit.WithTrust(pubA))
	if !rep.OK() || rep.SignedThrough != envs[len(envs)-1].Version {
		t.Fatalf("verify with --trust: %+v, signed through %d of %d", rep.Problem, rep.SignedThrough, envs[len(envs)-1].Version)
	}
}

// TestSemantics8_AnIdleRunWhoseDeciderDiedBeforeSigningIsSignedByTheNext
// (docs/semantics.md §8: pending work is retried, never dropped;
// docs/adr/0026-signed-heads.md): a run waits for two approvals; a person
// rejected one through runner-a, which appended the rejection — the run is
// still idle, waiting for the other — and died before its signature. With
// a head key the rejection's append put the run's weft_drivers entry first
// (keyBeforeAppend), so the owner of the partition finds it and takes the
// run over at once (not lazily: its head is behind), and signs the
// rejection. Before, an idle run kept no entry and the rejection stayed
// unsigned until the next person's decision.
func TestSemantics8_AnIdleRunWhoseDeciderDiedBeforeSigningIsSignedByTheNext(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyB, pubB := userKey(t, 19)
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.Answer("done")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))

	// runner-a's history: two payments awaiting approval, one rejected,
	// no head_signed after it; its entry is there, its liveness key not.
	var s aggregate.State
	hd := appendDecided(t, h, "ir1", &s, aggregate.Start{Run: "ir1", Agent: desk.Ref(), Input: "pay twice", Limits: desk.Limits(), Runner: "runner-a"})
	one, two := payCall(500, "ok"), payCall(600, "ok")
	one.ID, two.ID = "call_1_1", "call_1_2"
	hd = appendDecidedAt(t, h, "ir1", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{one, two}}}))
	cfg, _ := desk.ToolConfig("pay")
	approval := aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}
	hd = appendDecidedAt(t, h, "ir1", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{
		{CallID: one.ID, Validation: events.CallValid, Normalized: one.Arguments, Policy: approval, Tool: cfg},
		{CallID: two.ID, Validation: events.CallValid, Normalized: two.Arguments, Policy: approval, Tool: cfg}}})
	first, _ := s.Action(aggregate.Status(s).Approvals[0])
	hd = appendDecidedAt(t, h, "ir1", &s, hd, aggregate.Reject{Action: first.ID, Revision: first.Request.Revision, Reason: "too much", By: "alice"})
	rejected := hd.Version
	if !aggregate.Idle(s) || !s.HeadBehind() {
		t.Fatalf("crafted history: idle %v, head behind %v; want an idle run owing a signature", aggregate.Idle(s), s.HeadBehind())
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, runner.DriverKey("ir1", runner.DefaultPartitions), []byte("runner-a")); err != nil {
		t.Fatal(err)
	}

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	deadline := time.Now().Add(20 * time.Second)
	for {
		envs, _, err := h.srv.Log.Load(context.Background(), "ir1")
		if err != nil {
			t.Fatal(err)
		}
		rep := audit.Verify(envs, audit.WithTrust(pubB), audit.WithUnfinished())
		if rep.OK() && rep.SignedThrough >= rejected {
			if st := aggregate.Status(h.state("ir1")); st.Kind != aggregate.StatusSuspended {
				t.Fatalf("status %s after the signature, want still suspended on the other approval", st.Kind)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rejection at version %d was never signed by runner-b: verify %+v, signed through %d, log ends with %s", rejected, rep.Problem, rep.SignedThrough, envs[len(envs)-1].Type)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSemantics8_APersonsDecisionLeavingARunIdleKeepsItsEntryUntilSigned
// (docs/adr/0026-signed-heads.md): with a head key, a rejection that leaves
// a run idle (it still waits for another approval) is appended after the
// run's weft_drivers entry, and the entry is there once the rejection is
// answered while its signature is owed — here it never lands (every
// head_signed append fails) — so that a successor finds it if this runner
// dies (the test above). Before, an idle run had no entry. (That the run is
// then kept until signed rests on isIdle and on the retry of the
// signature, which alone keeps it in memory meanwhile.)
func TestSemantics8_APersonsDecisionLeavingARunIdleKeepsItsEntryUntilSigned(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	keyA, _ := userKey(t, 20)
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok"), payCall(600, "ok")), model.Answer("paid")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	nc := h.srv.Connect()
	ra, err := runner.New(nc, headlessJS{h.srv.JS}, []*agent.Agent{desk}, runner.WithID("runner-a"), runner.WithLease(2*time.Second), runner.WithDrainWindow(time.Second), runner.WithHeadKey(keyA), runner.WithoutSeal())
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(actx) }()
	t.Cleanup(func() { cancelA(); <-done })
	h.startServed(c, api.StartRequest{Run: "ik1", Agent: "desk", Input: "pay twice"})
	s := h.waitFor("ik1", "two approvals asked", func(s aggregate.State) bool {
		return len(aggregate.Status(s).Approvals) == 2
	})
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Reject(c, api.RejectRequest{CommandID: "no", Run: "ik1", Action: act.ID, Revision: act.Request.Revision, Reason: "too much", Approver: "desk", Credential: "bob"}); err != nil {
		t.Fatal(err)
	}
	if s := h.state("ik1"); !aggregate.Idle(s) || !s.HeadBehind() {
		t.Fatalf("after the rejection: idle %v, head behind %v; want an idle run owing a signature", aggregate.Idle(s), s.HeadBehind())
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(c, runner.DriverKey("ik1", runner.DefaultPartitions))
	if err != nil || string(e.Value()) != "runner-a" {
		t.Fatalf("the idle run's weft_drivers entry after an unsigned rejection: %v; want it naming runner-a", err)
	}
}

// TestSemantics8_AStaleOwnerDoesNotTakeOverAnIdleRunWhoseHeadIsBehind
// (docs/semantics.md §8: only a runner that is gone is recovered from; a
// partition moves only by compare-and-set): the takeover of an idle run
// whose head is behind (a person's decision its dead driver did not sign)
// is recorded at once, not lazily — so it is decided on the store's owner
// of the partition, as every takeover recorded at once is. A runner whose
// view of the partition is stale (the store says "other" owns it) records
// no run_recovered for it.
func TestSemantics8_AStaleOwnerDoesNotTakeOverAnIdleRunWhoseHeadIsBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	key, _ := userKey(t, 21)
	b := &bodies{}
	desk := build(t, model.NewScripted("desk", model.Answer("done")), []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithCommandTimeout(time.Second))
	const run = "stale-behind"
	var s aggregate.State
	hd := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: desk.Ref(), Input: "pay twice", Limits: desk.Limits(), Runner: "ghost"})
	one, two := payCall(500, "ok"), payCall(600, "ok")
	one.ID, two.ID = "call_1_1", "call_1_2"
	hd = appendDecidedAt(t, h, run, &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{one, two}}}))
	cfg, _ := desk.ToolConfig("pay")
	approval := aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}
	hd = appendDecidedAt(t, h, run, &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{
		{CallID: one.ID, Validation: events.CallValid, Normalized: one.Arguments, Policy: approval, Tool: cfg},
		{CallID: two.ID, Validation: events.CallValid, Normalized: two.Arguments, Policy: approval, Tool: cfg}}})
	first, _ := s.Action(aggregate.Status(s).Approvals[0])
	hd = appendDecidedAt(t, h, run, &s, hd, aggregate.Reject{Action: first.ID, Revision: first.Request.Revision, Reason: "too much", By: "alice"})
	_ = hd
	if !aggregate.Idle(s) || !s.HeadBehind() {
		t.Fatalf("crafted history: idle %v, head behind %v", aggregate.Idle(s), s.HeadBehind())
	}
	second, _ := s.Action(aggregate.Status(s).Approvals[0])

	r, _ := h.startRunner([]*agent.Agent{desk}, runner.WithoutScan(), runner.WithHeadKey(key))
	p := partition.Of(run, runner.DefaultPartitions)
	for !slices.Contains(r.Stats().Partitions, p) {
		if c.Err() != nil {
			t.Fatal("never claimed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, claimed := h.partRev(p)
	h.beating("other", []byte(`{"schema":1,"at":"x"}`))
	h.owns("other", run)
	waitNotOwning(t, r, p)
	r.StaleView(p, claimed)
	_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: second.ID, Revision: second.Request.Revision, Approver: "desk", Credential: "a"})
	t.Logf("approve: %v", err)
	if rr := h.recoveries(run); len(rr) != 0 {
		t.Fatalf("the run was recovered %+v by a runner that does not own its partition", rr)
	}
}
