package projector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projector"
)

// TestSemantics14_AFinishedRunsViewListsItsForks: a run restarted from a
// finished run (docs/semantics.md §14) is listed by the finished run's
// view query (forks), from the forks index entry derived from the new
// run's forked_from; the new run's view names its parent; a rebuild from
// sequence 1 writes the same keys, the forks entry among them.
func TestSemantics14_AFinishedRunsViewListsItsForks(t *testing.T) {
	s := startInterval(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })

	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000}
	f := &family{t: t, at: time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), states: map[string]aggregate.State{}}
	f.apply("fk-parent", aggregate.Start{Run: "fk-parent", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r", Limits: limits})
	f.apply("fk-parent", aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyFinalAnswer, Turn: events.Message{Role: "assistant", Text: "done"}}})
	parent := f.flush()
	_, fork, err := aggregate.ForkOf("fk-parent", parent, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.apply("fk-child", aggregate.Start{Run: "fk-child", Agent: events.AgentRef{Name: "desk", Version: "2"}, Input: "go", Runner: "r", Limits: limits, Fork: &fork})
	child := f.flush()
	appendLog(t, s.Log, append(parent, child...))
	waitSeq(t, p, lastSeq(t, s.JS))

	rep, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"fk-parent"}`)
	if len(rep.Forks) != 1 || rep.Forks[0].Run != "fk-child" || rep.Forks[0].Turn != 1 || rep.Forks[0].Version != parent[len(parent)-1].Version {
		t.Fatalf("the finished run's forks: %+v", rep.Forks)
	}
	crep, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"fk-child"}`)
	if ff := crep.View.ForkedFrom; ff == nil || ff.Run != "fk-parent" || ff.Turn != 1 || len(crep.Forks) != 0 {
		t.Fatalf("the restarted run's view: forked_from %+v, forks %+v", ff, crep.Forks)
	}

	live := dump(t, s.JS)
	found := false
	for k := range live {
		found = found || strings.HasPrefix(k, projector.BucketIndex+"/forks.e.") && strings.HasSuffix(k, ".fk-parent.fk-child")
	}
	if !found {
		t.Fatal("no forks index entry for fk-child")
	}
	purge(t, s.JS)
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}
