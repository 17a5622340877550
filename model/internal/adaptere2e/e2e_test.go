package adaptere2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic/anthropictest"
	"github.com/weftrun/weft/model/internal/fakeserver"
	"github.com/weftrun/weft/model/openai/openaitest"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// The payment desk of the test: lookup_invoice is allowed, send_payment
// over 1000 needs the finance approval.
type lookupIn struct {
	ID string `json:"id"`
}

type invoice struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

type payIn struct {
	Invoice string `json:"invoice"`
	Amount  int64  `json:"amount"`
}

type payment struct {
	ID string `json:"id"`
}

var (
	lookupDef = tools.Define[lookupIn, invoice]("lookup_invoice", "Look an invoice up.")
	payDef    = tools.Define[payIn, payment]("send_payment", "Pay an invoice.")
	finance   = policy.Requirement{Name: "finance", Version: 1}
)

func desk(t *testing.T, m model.Model, lookups, pays *atomic.Int64) *agent.Agent {
	t.Helper()
	classify := func(err error) tools.Failure { return tools.Uncertain(err.Error()) }
	lookup := tools.Bind(lookupDef, func(_ context.Context, _ tools.Call, in lookupIn) (invoice, error) {
		lookups.Add(1)
		return invoice{ID: in.ID, Amount: 120000}, nil
	}, classify)
	pay := tools.Bind(payDef, func(_ context.Context, call tools.Call, in payIn) (payment, error) {
		pays.Add(1)
		return payment{ID: "pay-" + in.Invoice}, nil
	}, classify)
	p := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		in, matched, err := tools.Input(payDef, a)
		if err != nil {
			return policy.Decision{}, err
		}
		if matched && in.Amount > 1000 {
			return policy.RequireApproval(finance), nil
		}
		return policy.Allow(), nil
	})
	a, err := agent.New("desk", m, []tools.Tool{lookup, pay}, p,
		agent.WithApprovers(approvers.Trusting("finance-desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var calls = []model.ToolCall{
	{ID: "call_lookup", Name: "lookup_invoice", Arguments: json.RawMessage(`{"id":"INV-7"}`)},
	{ID: "call_pay", Name: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-7","amount":120000}`)},
}

// adapter is one provider under test: a fake server scripted with a turn
// asking for both calls and a final answer, the model on it, and how to
// read the tool results (call ids and contents, in order) from the last
// request the fake server saw.
type adapter struct {
	name    string
	start   func(t *testing.T) (model.Model, *fakeserver.Server)
	results func(t *testing.T, req fakeserver.Request) (ids, contents []string)
}

var adapters = []adapter{
	{
		name: "openai",
		start: func(t *testing.T) (model.Model, *fakeserver.Server) {
			srv := openaitest.NewFakeServer(t)
			srv.Enqueue(openaitest.ToolCalls(calls...), openaitest.Text("Paid INV-7."))
			return srv.Model("gpt-test"), srv.Server
		},
		results: func(t *testing.T, req fakeserver.Request) (ids, contents []string) {
			c, err := openaitest.Decode(req)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.Messages {
				if m.Role == "tool" {
					ids = append(ids, m.ToolCallID)
					contents = append(contents, m.Text())
				}
			}
			return ids, contents
		},
	},
	{
		name: "anthropic",
		start: func(t *testing.T) (model.Model, *fakeserver.Server) {
			srv := anthropictest.NewFakeServer(t)
			srv.Enqueue(anthropictest.ToolUses(calls...), anthropictest.Text("Paid INV-7."))
			return srv.Model("claude-test"), srv.Server
		},
		results: func(t *testing.T, req fakeserver.Request) (ids, contents []string) {
			m, err := anthropictest.Decode(req)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range m.Messages {
				for _, raw := range msg.Content {
					var b struct {
						Type      string          `json:"type"`
						ToolUseID string          `json:"tool_use_id"`
						Content   json.RawMessage `json:"content"`
					}
					if err := json.Unmarshal(raw, &b); err != nil {
						t.Fatal(err)
					}
					if b.Type == "tool_result" {
						ids = append(ids, b.ToolUseID)
						contents = append(contents, string(b.Content))
					}
				}
			}
			return ids, contents
		},
	},
}

// TestFullRunThroughEachAdapter is the adapters' end-to-end check: for each
// adapter, a run asks for two tools in one turn, the payment waits for an
// approval (scenario 15: approved with a valid proof, the tool runs
// exactly once), and the run completes with the model's final answer; the
// provider saw both results, in call order, on the second request.
func TestFullRunThroughEachAdapter(t *testing.T) {
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, fake := ad.start(t)
			var lookups, pays atomic.Int64
			a := desk(t, m, &lookups, &pays)

			// A lease that survives a loaded 2-core machine (as the runner's own
			// harness uses); one runner only, so it never decides anything here.
			const lease = 2 * time.Second
			srv := natstest.Start(t, natstest.WithAssets(runner.Assets(lease)...))
			if err := runner.Provision(ctx, srv.JS, lease); err != nil {
				t.Fatal(err)
			}
			r, err := runner.New(srv.Connect(), srv.JS, []*agent.Agent{a}, runner.WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("runner: %v", err)
				}
			}()

			client := api.NewClient(srv.Conn)
			start := func() error {
				_, err := client.Start(ctx, api.StartRequest{Run: "e2e", Agent: "desk", Input: "pay INV-7"})
				return err
			}
			// The command service may not be subscribed yet.
			for err := start(); err != nil; err = start() {
				if ctx.Err() != nil {
					t.Fatalf("start: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}

			s := waitFor(t, ctx, srv, func(s aggregate.State) bool {
				return aggregate.Status(s).Kind == aggregate.StatusSuspended
			})
			st := aggregate.Status(s)
			if len(st.Approvals) != 1 {
				t.Fatalf("approvals pending = %v, want the payment only", st.Approvals)
			}
			act, _ := s.Action(st.Approvals[0])
			if !strings.HasSuffix(act.ID, "/call_pay") {
				t.Fatalf("pending approval for %s, want the payment", act.ID)
			}
			if _, err := client.Approve(ctx, api.ApproveRequest{CommandID: "approve-1", Run: "e2e", Action: act.ID,
				Revision: act.Request.Revision, Approver: "finance-desk", Credential: "alice"}); err != nil {
				t.Fatal(err)
			}

			s = waitFor(t, ctx, srv, func(s aggregate.State) bool {
				return aggregate.Status(s).Kind == aggregate.StatusFinished
			})
			out, _ := s.Finished()
			if out.Kind != events.OutcomeCompleted || s.Turn() != 2 {
				t.Fatalf("outcome %+v after %d turns, want completed after 2", out, s.Turn())
			}
			if done, _ := s.Action(act.ID); len(done.Answers) != 1 || done.Answers[0].Reviewer != "alice" || done.Answers[0].Verifier != "finance-desk" {
				t.Fatalf("approval recorded as %+v, want alice verified by finance-desk", done.Answers)
			}
			if lookups.Load() != 1 || pays.Load() != 1 {
				t.Fatalf("lookup ran %d times, payment %d times; want once each", lookups.Load(), pays.Load())
			}
			reqs := fake.Requests()
			if len(reqs) != 2 {
				t.Fatalf("provider saw %d requests, want 2", len(reqs))
			}
			ids, contents := ad.results(t, reqs[1])
			if strings.Join(ids, ",") != "call_lookup,call_pay" {
				t.Fatalf("tool results for %v, want call_lookup,call_pay in call order", ids)
			}
			if !strings.Contains(contents[0], "120000") || !strings.Contains(contents[1], "pay-INV-7") {
				t.Fatalf("tool result contents %q", contents)
			}
		})
	}
}

// waitFor folds the run from the log until cond holds.
func waitFor(t *testing.T, ctx context.Context, srv *natstest.Server, cond func(aggregate.State) bool) aggregate.State {
	t.Helper()
	for {
		envs, _, err := srv.Log.Load(ctx, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]events.Recorded, 0, len(envs))
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
		}
		s := aggregate.Fold(recs)
		if s.Exists() && cond(s) {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("run e2e: status %+v, actions %+v", aggregate.Status(s), s.Actions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
