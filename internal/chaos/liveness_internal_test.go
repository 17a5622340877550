package chaos

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_AnswerableCheckNamesCommandsToldTheyWereMalformed: the
// check run_not_answerable (docs/semantics.md §8, "A run can always be
// answered")
// names every command of the workload answered invalid_request or
// internal — the stranded runs' approvals and cancels were answered
// "invalid_request: recovery cause idle: ... not idle" — and no other
// answer; a finished run gets no probe.
func TestSemantics8_AnswerableCheckNamesCommandsToldTheyWereMalformed(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	perRun, _ := projtest.Histories(7, 200)
	var finished string
	for _, h := range perRun {
		if _, done := aggregate.Fold(h).Finished(); done {
			var head eventlog.Head
			for _, r := range h {
				var err error
				if _, head, err = s.Log.Append(ctx, r.Run, head, r.At, r.Event); err != nil {
					t.Fatalf("append %s v%d: %v", r.Run, r.Version, err)
				}
			}
			finished = h[0].Run
			break
		}
	}
	if finished == "" {
		t.Fatal("the generated histories lack a finished run")
	}
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	h.cmds = []command{
		{kind: "approve", run: "r1", action: "1/c1", rev: 1, id: "a1", code: string(weft.CodeInvalidRequest), msg: "recovery cause idle: run r1 is not idle"},
		{kind: "cancel", run: "r2", id: "c1", code: string(weft.CodeInternal), msg: "the runtime's own recover decision was refused"},
		{kind: "approve", run: "r3", action: "1/c1", rev: 2, id: "a2", code: string(weft.CodeStaleReference)},
		{kind: "reject", run: "r4", action: "1/c1", rev: 1, id: "r1", ok: true},
		{kind: "reconcile", run: "r5", action: "1/c1", id: "rc1", code: string(weft.CodeRunnerBusy)},
	}
	w := &workload{h: h, plans: []plan{{id: finished}}, started: map[string]bool{finished: true}}
	h.checkAnswerable(ctx, w)
	var got []string
	for _, v := range h.violations {
		if v.Check != checkNotAnswerable {
			t.Errorf("violation %s, want %s", v, checkNotAnswerable)
		}
		got = append(got, v.Run)
	}
	if want := []string{"r1", "r2"}; !slices.Equal(got, want) {
		t.Fatalf("violations for runs %v, want %v: %v", got, want, h.violations)
	}
}
