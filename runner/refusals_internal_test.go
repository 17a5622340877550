package runner

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
)

// docs/semantics.md §8, "A run can always be answered": when the decision core
// refuses a decision the runtime derived itself — here the takeover a
// runner holds for a run, whose cause no longer matches the log — the
// command that met it is answered internal, never the refusal's
// invalid_request (the caller's request was well formed); a worker's
// report or settlement is answered runner_busy, so that it is retried;
// the refusal is logged at error level with the run and counted; and the
// run is dropped from memory, to be derived again from its log.
func TestSemantics8_AnInternalRefusalIsNeverTheCallersFault(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	logs, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New("desk", model.NewScripted("s"), nil, policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { return policy.Allow(), nil })).Build()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(srv.Connect(), srv.JS, []*agent.Agent{a}, WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	start := aggregate.Start{Run: "ir1", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"}
	s := aggregate.State{}
	evs, err := aggregate.Decide(s, start, r.now())
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		s = aggregate.Evolve(s, events.Recorded{Run: "ir1", Version: uint64(i + 1), At: r.now(), Event: e})
	}
	// A model call in flight: the run is not idle, so a takeover with
	// cause idle is refused by the core.
	rn := newRun("ir1", s, eventlog.Head{}, a)
	rn.driven, rn.pre, rn.takeover = true, s, &aggregate.Recover{Runner: r.id, Cause: events.RecoveredIdle}
	r.runs["ir1"] = rn
	r.stopped = true // not running: no wake in the background after the test
	_ = rn.lock(context.Background())

	err = r.step(context.Background(), rn, aggregate.Cancel{By: "dave"})
	rn.unlock()
	if code := weft.ErrorCode(err); code != weft.CodeInternal {
		t.Fatalf("a cancel meeting an internal refusal: %v (code %s), want internal", err, code)
	}
	if code := weft.ErrorCode(busyIfInternal(err)); code != weft.CodeRunnerBusy {
		t.Errorf("a report meeting it: code %s, want runner_busy", code)
	}
	if !retryTimer(err) {
		t.Error("a timer meeting it is not fired again")
	}
	if Holds(r, "ir1") {
		t.Error("the run is still held in memory")
	}
	if n := r.Stats().InternalRefusals; n != 1 {
		t.Errorf("%d internal refusals counted, want 1", n)
	}
	b, _ := os.ReadFile(logs.Name())
	if l := string(b); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "run=ir1") || !strings.Contains(l, "recovery cause idle") {
		t.Errorf("not logged at error level with the run and the refusal: %q", l)
	}
}
