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
// restarted run's head right after its first message (the run_forked that
// records who restarted it), before the run's model answers — not only at
// its next decision or its end.
func TestSignedHeadsFollowARestart(t *testing.T) {
	t.Parallel()
	key, pub := userKey(t, 7)
	h, _ := keepHarnessOn(t, approvers.People{}, []runner.Option{runner.WithID("runner-a"), runner.WithHeadKey(key)}, "done-1")
	if _, err := h.client.Restart(ctx(t), api.RestartRequest{CommandID: "re", Run: "re-1", From: api.RestartFrom{Run: "done-1", Turn: 1}, By: "carol", Reason: "tool fixed"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("re-1", aggregate.StatusFinished)
	envs, _, err := h.srv.Log.Load(ctx(t), "re-1")
	if err != nil {
		t.Fatal(err)
	}
	var forked uint64
	for _, r := range recorded(t, envs) {
		switch e := r.Event.(type) {
		case events.RunForked:
			forked = r.Version
		case events.ModelReplied:
			t.Fatalf("the restarted run's model replied (event %d) before any head was signed after its run_forked (event %d)", r.Version, forked)
		case events.HeadSigned:
			if forked == 0 || e.Version < forked {
				t.Fatalf("event %d signs head %d, before the run_forked", r.Version, e.Version)
			}
			if e.Key != pub || e.End {
				t.Fatalf("the first signed head %+v, want by %s, not the end's", e, pub)
			}
			return
		}
	}
	t.Fatal("the restarted run has no signed head")
}
