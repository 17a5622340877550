package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// notStartedHarness is a worker of queue("echo") whose deliveries are held
// between their claim and their body (worker.SetAfterClaim) until the test
// has made the attempt end there, and whose check after the claim answers
// what the test set (ended: the run recorded the attempt's end meanwhile).
type notStartedHarness struct {
	*crashHarness
	w       *worker.Worker
	nc      *nats.Conn
	ended   atomic.Bool
	claimed chan api.Task
	hold    chan struct{}
}

func newNotStartedHarness(t *testing.T) *notStartedHarness {
	h := &notStartedHarness{crashHarness: newCrashHarness(t), claimed: make(chan api.Task, 4), hold: make(chan struct{})}
	h.nc = h.srv.Connect()
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	h.w = worker.New(h.nc, js, worker.WithID("w-held"), worker.WithReporter(h.rs.report), worker.WithAckWait(time.Second),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return !h.ended.Load(), nil }))
	h.w.SetAfterClaim(func(task api.Task) {
		h.claimed <- task
		<-h.hold
	})
	h.w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		h.starts.Add(1)
		h.started <- struct{}{}
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	t.Cleanup(func() {
		select {
		case <-h.hold:
		default:
			close(h.hold)
		}
		cancel()
		<-done
	})
	h.consumer()
	return h
}

// claimOf reads and decodes the claim of task's attempt.
func (h *notStartedHarness) claimOf(task api.Task) (api.Claim, uint64) {
	h.t.Helper()
	e, err := claimsKV(h.t, h.crashHarness).Get(context.Background(), api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation))
	if err != nil {
		h.t.Fatal(err)
	}
	var c api.Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		h.t.Fatal(err)
	}
	return c, e.Revision()
}

// TestSemantics8_ClosingAnAttemptAClaimWhoseBodyWillNotStartIsMarkedNotStarted
// (docs/semantics.md §8, "Closing an attempt"; docs/adr/0023, "Claims
// released as not started"): a worker that holds an attempt's claim and
// then decides not to start its body — its check after the claim finds the
// attempt ended, its run's stop came, or the deadline passed — replaces its
// own claim by the same claim marked not started (why) before it acks or
// reports the task, and never starts the body. A later delivery of the
// task, even one naming the claim's token as unstarted
// (api.HeaderUnstartedClaim, which takes a plain claim over and starts the
// body), acks it without starting the body. The worker that marked reports
// the mark (lost, cause not_started), and so does each later delivery that
// finds it (in case the marker died before its report): the run reads the
// claim (docs/adr/0023, "Late evidence: a mark after the decision").
func TestSemantics8_ClosingAnAttemptAClaimWhoseBodyWillNotStartIsMarkedNotStarted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		why      string
		deadline bool
		// meanwhile makes the held attempt end, while the worker holds its
		// claim and has not started its body.
		meanwhile func(h *notStartedHarness, task api.Task)
	}{
		{why: api.ClaimEnded, meanwhile: func(h *notStartedHarness, _ api.Task) { h.ended.Store(true) }},
		{why: api.ClaimStopped, meanwhile: func(h *notStartedHarness, task api.Task) {
			seen := h.w.StopsSeen()
			if err := h.nc.Publish(api.StopSubjectPrefix+task.Run, nil); err != nil {
				h.t.Fatal(err)
			}
			waitUntil(h.t, "the run's stop seen by the worker", func() (bool, string) {
				n := h.w.StopsSeen()
				return n != seen, fmt.Sprintf("%d stops seen, as before the stop was published", n)
			})
		}},
		{why: api.ClaimDeadline, deadline: true, meanwhile: func(_ *notStartedHarness, task api.Task) {
			time.Sleep(time.Until(*task.Deadline) + 10*time.Millisecond)
		}},
	} {
		t.Run(tc.why, func(t *testing.T) {
			t.Parallel()
			h := newNotStartedHarness(t)
			task := echoTask("ns-" + tc.why)
			if tc.deadline {
				d := time.Now().Add(3 * time.Second)
				task.Deadline, task.TimeoutMS = &d, 3000
			}
			publish(t, h.srv.JS, task)
			held := receive(t, "the task's claim taken by w-held", h.claimed)
			tc.meanwhile(h, held)
			close(h.hold)
			h.waitEmpty()
			c, _ := h.claimOf(task)
			if c.NotStarted == nil || c.NotStarted.Why != tc.why || c.Worker != "w-held" || c.Token == "" {
				t.Fatalf("claim %+v: want w-held's own claim marked not started (%s)", c, tc.why)
			}
			h.rs.mu.Lock()
			got := append([]api.Report(nil), h.rs.got...)
			h.rs.mu.Unlock()
			switch {
			case tc.deadline && (len(got) != 1 || got[0].Outcome != api.OutcomeLost || got[0].Cause != "timed_out"):
				t.Fatalf("reports %+v: want one, lost timed_out (the run's close of that loss finds the claim not started)", got)
			case !tc.deadline && (len(got) != 1 || got[0].Outcome != api.OutcomeLost || got[0].Cause != api.CauseNotStarted):
				t.Fatalf("reports %+v: want one, lost not_started (the run reads the claim: docs/adr/0023, \"Late evidence\")", got)
			}

			if tc.deadline {
				return // a later delivery is past the deadline: never claims
			}
			// A copy naming the claim's token as unstarted, then a plain
			// delivery: neither takes the claim over nor starts the body.
			m := nats.NewMsg(queue("echo").Subject())
			task.Schema, task.Agent, task.Version = 1, "a", "1"
			m.Data, _ = json.Marshal(task)
			m.Header.Set(api.HeaderUnstartedClaim, c.Token)
			if _, err := h.srv.JS.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			publish(t, h.srv.JS, task)
			h.waitEmpty()
			if n := h.starts.Load(); n != 0 {
				t.Fatalf("%d body starts; want none", n)
			}
			h.rs.mu.Lock()
			defer h.rs.mu.Unlock()
			// A later delivery that reads the claim reports the mark again
			// (in case its marker died before its own report), and
			// nothing else; one that waited for the other's hold ends as
			// that one did, so they report once or twice.
			later := h.rs.got[len(got):]
			if len(later) == 0 {
				t.Fatalf("no report after the later deliveries: want the mark reported (lost not_started)")
			}
			for _, r := range later {
				if r.Outcome != api.OutcomeLost || r.Cause != api.CauseNotStarted {
					t.Fatalf("reports %+v after the later deliveries: want only lost not_started", later)
				}
			}
		})
	}
}

// TestSemantics8_ClosingAnAttemptAMarkThatLosesItsRevisionLeavesTheOtherValue
// (docs/adr/0023, "Claims released as not started"): the mark is an update
// at the revision the worker's claim was created with, so it changes only
// the worker's own claim. When the key holds another value by then (here
// the runtime's closed value, written over a claim that was gone), the mark
// loses (a revision conflict) and the other value stays unchanged. (The
// body does not start either, but that is the ended attempt's doing: the
// worker's check found it ended, which is why it marked.)
func TestSemantics8_ClosingAnAttemptAMarkThatLosesItsRevisionLeavesTheOtherValue(t *testing.T) {
	t.Parallel()
	h := newNotStartedHarness(t)
	task := echoTask("ns-lost-cas")
	publish(t, h.srv.JS, task)
	receive(t, "the task's claim taken by w-held", h.claimed)
	kv := claimsKV(t, h.crashHarness)
	key := api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation)
	_, rev := h.claimOf(task)
	closed, _ := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "runner-x", Why: "cancelled", At: time.Now().UTC()}})
	if _, err := kv.Update(context.Background(), key, closed, rev); err != nil {
		t.Fatal(err)
	}
	h.ended.Store(true)
	close(h.hold)
	h.waitEmpty()
	if c, _ := h.claimOf(task); c.Closed == nil || c.Closed.By != "runner-x" || c.NotStarted != nil {
		t.Fatalf("claim %+v: want the value written over the worker's claim, unchanged", c)
	}
	if n := h.starts.Load(); n != 0 {
		t.Fatalf("%d body starts; want none", n)
	}
}

// TestSemantics8_ClosingAnAttemptAReportSavedInAClaimMarkedNotStartedIsDelivered
// (docs/protocol/41-tasks.md, rules 1 and 6): a worker whose deadline
// passed after its claim marks the claim not started and reports the
// attempt lost timed_out; when that report could not be delivered it is
// saved in the claim, and a later delivery of the task delivers it, as any
// saved report — without starting the body.
func TestSemantics8_ClosingAnAttemptAReportSavedInAClaimMarkedNotStartedIsDelivered(t *testing.T) {
	t.Parallel()
	h := newCrashHarness(t)
	kv := claimsKV(t, h)
	task := echoTask("ns-saved")
	saved := api.Report{Schema: 1, Run: task.Run, Action: task.Action, Attempt: 1, Incarnation: 1, Worker: "gone", Outcome: api.OutcomeLost, Cause: "timed_out",
		Evidence: "the deadline passed before the body started; the body was not started"}
	b, _ := json.Marshal(api.Claim{Schema: 1, Worker: "gone", Token: "t-gone", Claimed: time.Now().UTC(), Report: &saved,
		NotStarted: &api.ClaimNotStarted{Why: api.ClaimDeadline, At: time.Now().UTC()}})
	if _, err := kv.Create(context.Background(), api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation), b); err != nil {
		t.Fatal(err)
	}
	h.worker("b")
	h.consumer()
	publish(t, h.srv.JS, task)
	h.waitEmpty()
	if n := h.starts.Load(); n != 0 {
		t.Fatalf("%d body starts; want none", n)
	}
	h.rs.mu.Lock()
	defer h.rs.mu.Unlock()
	if len(h.rs.got) != 1 || h.rs.got[0].Cause != "timed_out" || h.rs.got[0].Worker != "gone" {
		t.Fatalf("reports %+v; want the saved one", h.rs.got)
	}
}
