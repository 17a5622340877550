package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/busyrunner"
	"github.com/weftrun/weft/internal/natstest"
)

// TestRetryRules_RunnerBusyIsRetriedWithTheSameCommandID (docs/protocol.md
// "Retry rules"; docs/semantics.md §8 "A run can always be answered"): the
// owner
// of the run's partition answers runner_busy three times, then leaves and
// a real runner takes the partition over. A Client with WithRetry sends
// the start again, with the one command id it gave it, and ends applied:
// the run exists and the command API kept the success under that id.
// Before, the Client returned the first runner_busy.
func TestRetryRules_RunnerBusyIsRetriedWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	c := api.NewClient(d.Server.Conn, api.WithRetry(api.DefaultRetryWithin))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.Start(ctx, api.StartRequest{Run: "busy-1", Agent: "notes", Input: "hello"})
	if err != nil {
		t.Fatalf("start: %v, want it applied after the retries", err)
	}
	if r.Run != "busy-1" {
		t.Fatalf("started %q", r.Run)
	}
	fw := d.Forwarded()
	if len(fw) == 0 || fw[0].CommandID == "" {
		t.Fatalf("the tries carried no command id: %+v", fw)
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-1", fw[0].CommandID, 3)
}

// TestRetryRules_CallersCommandIDIsKept: a command id the caller gave is
// the one every try carries.
func TestRetryRules_CallersCommandIDIsKept(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 2})
	c := api.NewClient(d.Server.Conn, api.WithRetry(api.DefaultRetryWithin))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Start(ctx, api.StartRequest{CommandID: "mine-1", Run: "busy-2", Agent: "notes", Input: "hello"}); err != nil {
		t.Fatalf("start: %v", err)
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-2", "mine-1", 2)
}

// TestRetryRules_WithoutRetryRunnerBusyIsReturned: a Client without
// WithRetry (the wire) returns the first runner_busy; the command was sent
// once.
func TestRetryRules_WithoutRetryRunnerBusyIsReturned(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	c := api.NewClient(d.Server.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Start(ctx, api.StartRequest{CommandID: "once-1", Run: "busy-3", Agent: "notes", Input: "hello"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeRunnerBusy}) {
		t.Fatalf("start: %v, want runner_busy", err)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// TestRetryRules_APermanentRefusalIsNeverRetried: a refusal whose code is
// not retryable (unknown_agent) is returned at once, however long the
// retry bound.
func TestRetryRules_APermanentRefusalIsNeverRetried(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)},
		Refusal: &weft.Error{Code: weft.CodeUnknownAgent, Message: "no runner serves notes@9"}})
	c := api.NewClient(d.Server.Conn, api.WithRetry(api.DefaultRetryWithin))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Start(ctx, api.StartRequest{Run: "busy-4", Agent: "notes", Input: "hello"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeUnknownAgent}) {
		t.Fatalf("start: %v, want unknown_agent", err)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// TestRetryRules_ARetryCutByTheCallersDeadlineIsNoAnswer
// (docs/protocol.md "Retry rules"; docs/semantics.md §5: an effect is never
// reported as not having happened when nobody knows): a command API that
// answers runner_busy after 250 ms, and a caller whose deadline ends while
// the second try waits for its answer. That try may have been applied, so
// the call answers that no answer came (the deadline's error), not the
// first try's runner_busy, which says nothing was applied: a client that
// read runner_busy would send a start again under a new id and pay twice.
func TestRetryRules_ARetryCutByTheCallersDeadlineIsNoAnswer(t *testing.T) {
	c := standIn(t, api.EndpointCancel, func(*nats.Msg) *weft.Error {
		time.Sleep(250 * time.Millisecond)
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: "busy"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Cancel(ctx, api.CancelRequest{Run: "r", By: "test"})
	if errors.Is(err, &weft.Error{Code: weft.CodeRunnerBusy}) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancel: %v, want no answer (context.DeadlineExceeded), not the earlier runner_busy", err)
	}
}

// TestRetryRules_AStartRetriedStartsOneRun (docs/semantics.md §3, an effect at
// most once; docs/protocol.md "Retry rules"): a start without a run id
// whose first try was applied but answered unavailable (its append's
// acknowledgement lost) is sent again; every try names the same run, which
// the Client chose, and the retry's already_started (same input) is that
// start: the call answers it started. Before, each try left the run id to
// the runner, which chose a new one: one call could start two runs. A
// restart (docs/semantics.md §14) starts a run too, and is sent the same
// way.
func TestRetryRules_AStartRetriedStartsOneRun(t *testing.T) {
	for endpoint, send := range startsOfARun {
		t.Run(endpoint, func(t *testing.T) {
			var mu sync.Mutex
			var runs []string
			c := standIn(t, endpoint, func(m *nats.Msg) *weft.Error {
				var req struct {
					Run string `json:"run"`
				}
				_ = json.Unmarshal(m.Data, &req)
				mu.Lock()
				runs = append(runs, req.Run)
				n := len(runs)
				mu.Unlock()
				e := &weft.Error{Code: weft.CodeUnavailable, Message: "the append's outcome is not known"}
				if n > 1 {
					same := true
					e = &weft.Error{Code: weft.CodeAlreadyStarted, Message: "run exists", SameInput: &same}
				}
				return e
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := send(ctx, c)
			if err != nil {
				t.Fatalf("%s: %v, want started", endpoint, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != 2 || runs[0] == "" || runs[0] != runs[1] || r.Run != runs[0] {
				t.Fatalf("tries named runs %q, answered %q: want two tries of one run the client chose", runs, r.Run)
			}
		})
	}
}

// startsOfARun are the commands that start a run, each sent without a run
// id.
var startsOfARun = map[string]func(context.Context, *api.Client) (api.StartReply, error){
	api.EndpointStart: func(ctx context.Context, c *api.Client) (api.StartReply, error) {
		return c.Start(ctx, api.StartRequest{Agent: "notes", Input: "pay"})
	},
	api.EndpointRestart: func(ctx context.Context, c *api.Client) (api.StartReply, error) {
		return c.Restart(ctx, api.RestartRequest{From: api.RestartFrom{Run: "parent", Turn: 2}})
	},
}

// standIn answers endpoint's requests with answer (the refusal it returns,
// nil for none, which leaves the request unanswered) in place of a
// runner, and returns a retrying Client of the same server.
func standIn(t *testing.T, endpoint string, answer func(*nats.Msg) *weft.Error) *api.Client {
	t.Helper()
	srv := natstest.Start(t)
	sub, err := srv.Conn.Subscribe(api.SubjectPrefix+endpoint, func(m *nats.Msg) {
		if e := answer(m); e != nil {
			body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: e})
			_ = m.Respond(body)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return api.NewClient(srv.Connect(), api.WithRetry(api.DefaultRetryWithin))
}

// TestRetryRules_AStartOfUnknownOutcomeNamesTheRunToRead (docs/semantics.md §8,
// a run can always be answered; docs/protocol.md "Retry rules"): a start
// without a run id answered outcome_unknown returns, with the error, the
// reply naming the run the Client chose for it, so that its caller reads
// that run to learn whether it started. Before, the reply was empty: the
// run id was in the message text alone.
func TestRetryRules_AStartOfUnknownOutcomeNamesTheRunToRead(t *testing.T) {
	for endpoint, send := range startsOfARun {
		t.Run(endpoint, func(t *testing.T) {
			sent := make(chan string, 1)
			c := standIn(t, endpoint, func(m *nats.Msg) *weft.Error {
				var req struct {
					Run string `json:"run"`
				}
				_ = json.Unmarshal(m.Data, &req)
				select {
				case sent <- req.Run:
				default:
				}
				return &weft.Error{Code: weft.CodeOutcomeUnknown, Message: "its append's outcome is not known and the run cannot be read"}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := send(ctx, c)
			if weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
				t.Fatalf("%s: %v, want outcome_unknown", endpoint, err)
			}
			if run := <-sent; run == "" || r.Run != run {
				t.Fatalf("the %s was sent for run %q, its reply names %q: want the run it was sent for", endpoint, run, r.Run)
			}
		})
	}
}
