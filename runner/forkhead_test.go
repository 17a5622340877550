package runner_test

import (
	"testing"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/runner"
)

// TestSignedHeadsFollowARestart (docs/adr/0026-signed-heads.md;
// docs/adr/0040-who-restarted-and-who-held.md; docs/semantics.md §14): a
// restart is a person's decision, so a runner with a head key signs the
// restarted run's head right after its first message (the one holding the
// run_forked that records who restarted it), before the run's model
// answers — not only at its next decision or its end. The first signed
// head signs exactly that message: the version and hash of its last
// event, and it is either sealed into that message as its last event or
// is the first event of the next one.
func TestSignedHeadsFollowARestart(t *testing.T) {
	t.Parallel()
	key, pub := userKey(t, 7)
	h, _ := keepHarnessOn(t, approvers.People{}, []runner.Option{runner.WithID("runner-a"), runner.WithHeadKey(key)}, "done-1")
	if _, err := h.client.Restart(ctx(t), api.RestartRequest{CommandID: "re", Run: "re-1", From: api.RestartFrom{Run: "done-1", Turn: 1}, By: "carol", Reason: "tool fixed"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("re-1", aggregate.StatusFinished)
	msgs := logMessages(t, h, "re-1")
	// The restart's message: the first, holding run_forked; its last
	// event other than a head_signed sealed into it is what the restart
	// decided last.
	if len(msgs) == 0 {
		t.Fatal("the restarted run has no log message")
	}
	first := msgs[0]
	var forked, last *events.Envelope
	sealed := false
	for i := range first {
		switch env := &first[i]; env.Type {
		case events.NameRunForked:
			forked, last = env, env
		case events.NameHeadSigned:
			sealed = true
			if i != len(first)-1 {
				t.Fatalf("the restart's message holds a head_signed at event %d of %d, not last", i+1, len(first))
			}
		default:
			last = env
		}
	}
	if forked == nil {
		t.Fatalf("the restarted run's first message holds no run_forked (%d events)", len(first))
	}
	// The first head_signed of the log: sealed into the restart's message,
	// else the first event of the next message.
	var signed events.Envelope
	switch {
	case sealed:
		signed = first[len(first)-1]
	case len(msgs) > 1 && len(msgs[1]) > 0:
		signed = msgs[1][0]
	default:
		t.Fatal("the restarted run has no message after its restart's")
	}
	for _, m := range msgs {
		for _, env := range m {
			if env.Type == events.NameModelReplied && env.Version < signed.Version {
				t.Fatalf("the restarted run's model replied (event %d) before any head was signed after its run_forked (event %d)", env.Version, forked.Version)
			}
		}
	}
	if signed.Type != events.NameHeadSigned {
		t.Fatalf("event %d, right after the restart's message (run_forked at %d, last event %d), is %s, want head_signed", signed.Version, forked.Version, last.Version, signed.Type)
	}
	ev, err := signed.Event()
	if err != nil {
		t.Fatal(err)
	}
	e := ev.(events.HeadSigned)
	if e.Version != last.Version || e.Hash != last.Hash() {
		t.Fatalf("the first signed head is head %d (%s), want the restart's message's last event %d (%s), run_forked at %d", e.Version, e.Hash, last.Version, last.Hash(), forked.Version)
	}
	if e.Key != pub || e.End {
		t.Fatalf("the first signed head %+v, want by %s, not the end's", e, pub)
	}
}
