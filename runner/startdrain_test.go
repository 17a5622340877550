package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md graceful drain (a SIGTERMed runner is done within its
// drain window) and §8 (every command is answered): a start in flight
// off its lane — here one forwarded to the owner of its partition, a
// stand-in that is alive — does not hold the drain before its window,
// and gets the window:
//   - the stand-in answers once the drain is past the service's Stop (the
//     in-process worker told to stop): the start is answered with the
//     owner's success. A Stop that waited for the start held the drain
//     there until the forward's own timeout (10 s), and the start was
//     answered outcome_unknown — this case fails on that code;
//   - the stand-in never answers: the start is ended at the window's end
//     and answered once, outcome_unknown (the owner may have started the
//     run), and Run returns. The agent's command timeout is a minute, so
//     the forward's own timeout (two of them) and the request's (30 s)
//     are past the test's 20 s wait: a start not ended with the drain
//     window fails this case.
func TestDrainEndsWithinItsWindow_StartInFlight(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		answerAtWS bool
		want       string
	}{
		{"owner answers during the drain", true, ""},
		{"owner never answers", false, "outcome_unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.unbalanced = true // the run's partition stays with the stand-in
			a := build(t, model.NewScripted("s", model.Answer("unused")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow), agent.WithCommandTimeout(time.Minute))
			// "paused" is alive (its key is put) and answers only when
			// the test says.
			h.heartbeat("paused")
			h.owns("paused", "sd") // it owns the run's partition
			taken := make(chan *nats.Msg, 1)
			sub, err := h.srv.Conn.Subscribe(runner.ForwardPrefix+"paused.cmd", func(m *nats.Msg) {
				select {
				case taken <- m:
				default:
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()

			forwarded := make(chan *nats.Msg, 1)
			_, stop := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(time.Second), runner.WithHook(func(event string, _ int, _ string) {
				if event != "worker-stopped" || !c.answerAtWS {
					return
				}
				m := <-forwarded
				b, _ := json.Marshal(api.StartReply{Schema: api.Schema, Run: "sd", Status: "working"})
				_ = m.Respond(b)
			}))
			nc := h.srv.Connect()
			inbox := nc.NewRespInbox()
			replies := make(chan *nats.Msg, 4)
			rs, err := nc.ChanSubscribe(inbox, replies)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Unsubscribe()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(api.StartRequest{Schema: api.Schema, Run: "sd", Agent: "desk", Input: "x"})
			if err := nc.PublishRequest("weft.api."+api.EndpointStart, inbox, body); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-taken:
				forwarded <- m
			case <-time.After(20 * time.Second):
				t.Fatal("the start was never forwarded to the partition's owner")
			}
			stop() // SIGTERM-like: returns when Run returned
			var m *nats.Msg
			select {
			case m = <-replies:
			case <-time.After(20 * time.Second):
				t.Fatal("the start in flight was not answered within 20 s")
			}
			var er api.ErrorReply
			_ = json.Unmarshal(m.Data, &er)
			switch {
			case c.want == "" && er.Error != nil:
				t.Fatalf("start answered %s, want the owner's success (the drain held before its window?)", m.Data)
			case c.want != "" && (er.Error == nil || string(er.Error.Code) != c.want):
				t.Fatalf("start answered %s, want %s", m.Data, c.want)
			}
			select {
			case m := <-replies:
				t.Fatalf("a second answer: %s", m.Data)
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
}
