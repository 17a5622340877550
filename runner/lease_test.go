package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (no takeover of a live runner's work): a runner
// configured
// with a longer lease than the weft_runners bucket it finds (provisioned
// by someone else, 2 s here) still heartbeats within the bucket's max age,
// so its liveness key never lapses while it lives and no peer takes its
// runs over (which would make its running bodies uncertain). The key is
// watched for 1.5 times the bucket's max age.
func TestLiveKeyNeverLapsesWithALongerConfiguredLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	// On the wall clock, not a fake ownership clock: what is proven is that
	// the heartbeat's period (the ownership clock's) beats the bucket's max
	// age, which is the server's time; a fake clock stepped by hand would
	// beat whenever the test says.
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithLease(20*time.Second))
	kv, err := h.srv.JS.KeyValue(context.Background(), runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(st.TTL() + st.TTL()/2)
	for time.Now().Before(end) {
		if _, err := kv.Get(context.Background(), r.ID()); err != nil {
			t.Fatalf("the live runner's key lapsed: %v", err)
		}
		// wall clock: the key lapses on the bucket's max age, the server's time (see above)
		time.Sleep(50 * time.Millisecond)
	}
}
