package runner_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// messagesOf reads run's messages in the log, in log order, as the names
// of the events each holds (one message per decision, docs/adr/0001).
func messagesOf(t *testing.T, h *harness, run string) [][]events.Name {
	t.Helper()
	last := h.state(run).Version()
	var out [][]events.Name
	var seq uint64
	stop := errors.New("read to the run's last event")
	err := h.srv.Log.Subscribe(ctx(t), 1, func(se eventlog.StreamEvent) error {
		if se.Run != run || se.Poison != nil || se.Void != nil {
			return nil
		}
		if se.Seq != seq {
			seq = se.Seq
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], se.Envelope.Type)
		if se.Last && se.Envelope.Version == last {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("read run %s: %v", run, err)
	}
	return out
}

// replyMessages returns the messages of msgs holding a model_replied.
func replyMessages(msgs [][]events.Name) [][]events.Name {
	var out [][]events.Name
	for _, m := range msgs {
		if slices.Contains(m, events.NameModelReplied) {
			out = append(out, m)
		}
	}
	return out
}

// docs/semantics.md §8 and docs/adr/0027-fewer-writes-per-step.md: the
// steady state of a run of three tool turns and an answer (weft bench's
// workload) is one message for the start, two per step — the model's reply
// with its resolution (validation, policy, queue, fence), the report with
// the next turn's request — and one for the answer: 8 appends, where a
// reply and its resolution in messages of their own made 11. Counted in
// the log; the run's events are unchanged.
func TestSemantics8_AReplyAndItsResolutionAreOneAppend(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "ok")), model.CallTools(payCall(2, "ok")), model.CallTools(payCall(3, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "fw1", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "fw1")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 3 || len(s.Actions()) != 3 {
		t.Fatalf("outcome %s, %d starts, %d actions", out.Kind, b.starts.Load(), len(s.Actions()))
	}
	msgs := messagesOf(t, h, "fw1")
	if len(msgs) != 8 {
		t.Fatalf("%d appends for a run of three steps, want 8: %v", len(msgs), msgs)
	}
	want := []events.Name{events.NameModelReplied, events.NameCallValidated, events.NamePolicyDecided, events.NameActionQueued, events.NameAttemptFenced}
	for i, rm := range replyMessages(msgs)[:3] {
		if !slices.Equal(rm, want) {
			t.Fatalf("the reply of turn %d is the message %v, want %v", i+1, rm, want)
		}
	}
}

// docs/semantics.md §8: a policy that requires approval or denies,
// decided while the reply is recorded, lands in the reply's message: the
// run is suspended on the approval by one append, and a denial asks the
// model again (the next turn's request) in that same append.
func TestSemantics8_APolicyDecisionIsInTheReplysAppend(t *testing.T) {
	t.Parallel()
	deny := func(context.Context, policy.Action) (policy.Decision, error) { return policy.Deny("no"), nil }
	for _, tc := range []struct {
		name   string
		policy policy.Func
		want   []events.Name
	}{
		{"approval required", approvalAbove, []events.Name{events.NameModelReplied, events.NameCallValidated, events.NamePolicyDecided, events.NameApprovalRequested}},
		{"denied", deny, []events.Name{events.NameModelReplied, events.NameCallValidated, events.NamePolicyDecided, events.NameModelRequested}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &bodies{}
			m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
			a := build(t, m, []tools.Tool{b.tool()}, tc.policy)
			h := newHarness(t)
			h.startRunner([]*agent.Agent{a})
			if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "fw2", Agent: "desk", Input: "x"}); err != nil {
				t.Fatal(err)
			}
			h.waitFor("fw2", "the first reply resolved", func(s aggregate.State) bool {
				return len(s.Actions()) == 1 && s.Actions()[0].State != aggregate.ActionRequested
			})
			rm := replyMessages(messagesOf(t, h, "fw2"))
			if len(rm) == 0 || !slices.Equal(rm[0], tc.want) {
				t.Fatalf("the replies' messages %v, want the first: %v", rm, tc.want)
			}
		})
	}
}

// countedModel counts the calls made to its model.
type countedModel struct {
	model.Model
	calls atomic.Int64
}

func (m *countedModel) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	m.calls.Add(1)
	return m.Model.Complete(ctx, req)
}

// replyFaultJS is the runner's JetStream, except that the first append of
// a model_replied to the log (of run, when set) fails: with nothing
// published (lost), or published with its acknowledgement lost (ackLost).
type replyFaultJS struct {
	jetstream.JetStream
	ackLost bool
	run     string
	fired   atomic.Bool
}

func (f *replyFaultJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	hit := strings.HasPrefix(m.Subject, "weft.ev.") && strings.Contains(m.Subject, f.run) && bytes.Contains(m.Data, []byte(`"type":"model_replied"`)) && !f.fired.Load()
	if hit && !f.ackLost {
		f.fired.Store(true)
		return nil, errors.Join(errors.New("the connection dropped before the append was sent"), nats.ErrConnectionClosed)
	}
	ack, err := f.JetStream.PublishMsg(ctx, m, opts...)
	if hit && err == nil {
		f.fired.Store(true)
		return nil, errors.Join(errors.New("the connection dropped before the acknowledgement"), nats.ErrConnectionClosed)
	}
	return ack, err
}

// docs/semantics.md §8 ("work that was not recorded is derived again"): a
// model reply recorded with its resolution in one append whose
// acknowledgement does not come is either not recorded at all — the reply
// is kept and recorded again with its resolution, the model is not asked
// twice — or recorded whole, which the runner finds in the log and acts on:
// either way the reply is recorded once, in one message with its fence,
// and the body runs once.
func TestSemantics8_AModelReplyWhoseCombinedAppendIsNotAcknowledgedIsRecordedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ackLost bool
	}{{"nothing landed", false}, {"landed, acknowledgement lost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := &bodies{}
			m := &countedModel{Model: model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))}
			a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
			h := newHarness(t)
			js := &replyFaultJS{JetStream: h.srv.JS, ackLost: tc.ackLost}
			h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*1e9))
			c := ctx(t)
			h.startServed(c, api.StartRequest{Run: "fw3", Agent: "desk", Input: "x"})
			s, out := finished(t, h, "fw3")
			if !js.fired.Load() {
				t.Fatal("no reply's append was faulted")
			}
			if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionSucceeded || b.starts.Load() != 1 || m.calls.Load() != 2 {
				t.Fatalf("outcome %s, action %s, %d starts, %d model calls (want completed, succeeded, 1, 2)", out.Kind, s.Actions()[0].State, b.starts.Load(), m.calls.Load())
			}
			rm := replyMessages(messagesOf(t, h, "fw3"))
			if len(rm) != 2 || !slices.Contains(rm[0], events.NameAttemptFenced) {
				t.Fatalf("the replies' messages %v, want the first reply once, with its fence", rm)
			}
		})
	}
}

type noteIn struct {
	Text string `json:"text"`
}

var noteDef = tools.Define[noteIn, payOut]("note", "Keep a note.")

// docs/semantics.md §8 and docs/adr/0027-fewer-writes-per-step.md: a reply
// whose resolution makes one message too large for the store is recorded
// alone (its arguments, 4.5 MB with spaces the codec drops, are in the
// reply and again, normalized, in call_validated: 9 MB together, over the
// 8 MB max_payload), and its resolution follows in a message of its own.
// The policy is asked once for the call, the model once for the turn, and
// the body starts once.
func TestSemantics8_AReplyTooLargeWithItsResolutionIsRecordedAlone(t *testing.T) {
	t.Parallel()
	var asked, starts atomic.Int64
	count := func(context.Context, policy.Action) (policy.Decision, error) {
		asked.Add(1)
		return policy.Allow(), nil
	}
	tool := tools.Bind(noteDef, func(ctx context.Context, call tools.Call, in noteIn) (payOut, error) {
		starts.Add(1)
		return payOut{ID: "n"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	text := strings.Repeat("x", natsnode.MaxPayload*9/16)
	m := model.NewScripted("s", model.CallTools(model.Call("note", `{ "text" : "`+text+`" }`)), model.Answer("ok"))
	a := build(t, m, []tools.Tool{tool}, policy.Func(count))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "fw5", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "fw5")
	if out.Kind != events.OutcomeCompleted || starts.Load() != 1 || len(s.Actions()) != 1 {
		t.Fatalf("outcome %s, %d starts, %d actions", out.Kind, starts.Load(), len(s.Actions()))
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the policy was asked %d times for one call, want 1", n)
	}
	if n := len(m.Requests()); n != 2 {
		t.Fatalf("the model was called %d times, want 2 (a turn each)", n)
	}
	msgs := messagesOf(t, h, "fw5")
	rm := replyMessages(msgs)
	if len(rm) != 2 || !slices.Equal(rm[0], []events.Name{events.NameModelReplied}) {
		t.Fatalf("the reply messages are %v, want the tool request's reply alone first", rm)
	}
	want := []events.Name{events.NameCallValidated, events.NamePolicyDecided, events.NameActionQueued, events.NameAttemptFenced}
	for i, msg := range msgs {
		if slices.Equal(msg, rm[0]) {
			if i+1 >= len(msgs) || !slices.Equal(msgs[i+1], want) {
				t.Fatalf("the message after the reply is not its resolution %v: %v", want, msgs)
			}
			break
		}
	}
}

// gatedFirst holds its first call until gate closes, saying on called
// that the call was made.
type gatedFirst struct {
	model.Model
	called chan struct{}
	gate   chan struct{}
	calls  atomic.Int64
}

func (m *gatedFirst) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	if m.calls.Add(1) == 1 {
		close(m.called)
		<-m.gate
	}
	return m.Model.Complete(ctx, req)
}

// docs/semantics.md §8 (graceful drain) and docs/adr/0027: a reply that
// arrives while its runner drains is recorded alone — the draining runner
// resolves no new calls and fences nothing — and the runner that takes
// the run over resolves it: the policy is asked there, the body starts
// once, the model is called once for the turn.
func TestSemantics8_AReplyDuringTheDrainIsRecordedWithoutItsResolution(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	count := func(context.Context, policy.Action) (policy.Decision, error) {
		asked.Add(1)
		return policy.Allow(), nil
	}
	b := &bodies{}
	m := &gatedFirst{Model: model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok")), called: make(chan struct{}), gate: make(chan struct{})}
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(count))
	h := newHarness(t)
	_, stopA := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(5*time.Second))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "fw6", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the model called", m.called)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stopA() }() // SIGTERM
	h.waitFor("fw6", "the hand-off", aggregate.State.HandedOff)
	close(m.gate) // the reply arrives during the drain
	receive(t, "the drain ended (its stop returned)", stopped)
	s := h.state("fw6")
	if len(s.Actions()) != 1 || asked.Load() != 0 || b.starts.Load() != 0 {
		t.Fatalf("after the drain: %d actions, the policy asked %d times, %d starts; want the reply recorded, unresolved", len(s.Actions()), asked.Load(), b.starts.Load())
	}
	rm := replyMessages(messagesOf(t, h, "fw6"))
	if len(rm) != 1 || !slices.Equal(rm[0], []events.Name{events.NameModelReplied}) {
		t.Fatalf("the draining runner's reply messages are %v, want the reply alone", rm)
	}

	h.startRunner([]*agent.Agent{a})
	s, out := finished(t, h, "fw6")
	if out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 || asked.Load() != 1 || m.calls.Load() != 2 {
		t.Fatalf("outcome %s, %d starts, the policy asked %d times, the model called %d times", out.Kind, b.starts.Load(), asked.Load(), m.calls.Load())
	}
	if a := s.Actions()[0]; a.State != aggregate.ActionSucceeded || a.Attempts != 1 {
		t.Fatalf("action %s after %d attempts", a.State, a.Attempts)
	}
}
