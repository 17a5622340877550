package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
)

func TestDecisions(t *testing.T) {
	req := policy.Requirement{Name: "finance", Version: 2}
	tests := []struct {
		d      policy.Decision
		kind   policy.Kind
		reason string
		req    policy.Requirement
		str    string
	}{
		{policy.Allow(), policy.KindAllow, "", policy.Requirement{}, "allow"},
		{policy.Deny("over the daily limit"), policy.KindDeny, "over the daily limit", policy.Requirement{}, "deny(over the daily limit)"},
		{policy.RequireApproval(req), policy.KindRequireApproval, "", req, "require_approval(finance v2)"},
		{policy.Decision{}, "", "", policy.Requirement{}, "invalid"},
	}
	for _, tt := range tests {
		if tt.d.Kind() != tt.kind || tt.d.Reason() != tt.reason || tt.d.Requirement() != tt.req || tt.d.String() != tt.str {
			t.Errorf("%v: kind %q reason %q requirement %+v", tt.d, tt.d.Kind(), tt.d.Reason(), tt.d.Requirement())
		}
	}
	// A Requirement converts to the event form directly, with the same JSON.
	ev := events.Requirement(req)
	a, _ := json.Marshal(req)
	b, _ := json.Marshal(ev)
	if string(a) != string(b) {
		t.Errorf("JSON differs: %s vs %s", a, b)
	}
}

func TestAlwaysAllowAndFunc(t *testing.T) {
	d, err := policy.AlwaysAllow().Decide(context.Background(), policy.Action{Tool: "anything"})
	if err != nil || d.Kind() != policy.KindAllow {
		t.Errorf("AlwaysAllow = %v, %v", d, err)
	}
	boom := errors.New("boom")
	p := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		if a.Target == policy.TargetAgent {
			return policy.Decision{}, boom
		}
		return policy.Deny(a.Tool), nil
	})
	if d, err := p.Decide(context.Background(), policy.Action{Tool: "x", Target: policy.TargetTool}); err != nil || d.Reason() != "x" {
		t.Errorf("Func = %v, %v", d, err)
	}
	if _, err := p.Decide(context.Background(), policy.Action{Target: policy.TargetAgent}); !errors.Is(err, boom) {
		t.Errorf("Func error = %v", err)
	}
}

func TestReviewerContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := policy.Reviewer(ctx); ok {
		t.Error("a plain context has a reviewer")
	}
	r := policy.Review{Reviewer: "ana@example.com", Verifier: "finance-sso", Requirement: policy.Requirement{Name: "finance", Version: 1}, Revision: 3}
	got, ok := policy.Reviewer(policy.WithReview(ctx, r))
	if !ok || got != r {
		t.Errorf("Reviewer = %+v, %v", got, ok)
	}
}

// Example is a policy that re-checks at approval time: a reviewer may not
// approve a payment to themselves.
func Example() {
	p := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		var pay struct {
			Payee string `json:"payee"`
		}
		if err := json.Unmarshal(a.Arguments, &pay); err != nil {
			return policy.Decision{}, err
		}
		r, ok := policy.Reviewer(ctx)
		switch {
		case !ok:
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		case r.Reviewer == pay.Payee:
			return policy.Deny("a reviewer cannot approve a payment to themselves"), nil
		}
		return policy.Allow(), nil
	})
	a := policy.Action{Run: "run-1", ActionID: "1/call_1", Tool: "send_payment", Target: policy.TargetTool,
		Arguments: json.RawMessage(`{"payee":"bob"}`)}
	ctx := context.Background()
	d, _ := p.Decide(ctx, a)
	fmt.Println("model asks:", d)
	d, _ = p.Decide(policy.WithReview(ctx, policy.Review{Reviewer: "bob", Verifier: "sso"}), a)
	fmt.Println("bob approves:", d)
	d, _ = p.Decide(policy.WithReview(ctx, policy.Review{Reviewer: "ana", Verifier: "sso"}), a)
	fmt.Println("ana approves:", d)
	// Output:
	// model asks: require_approval(finance v1)
	// bob approves: deny(a reviewer cannot approve a payment to themselves)
	// ana approves: allow
}

func TestEvaluateFailsClosed(t *testing.T) {
	boom := errors.New("database down")
	block := make(chan struct{})
	defer close(block)
	tests := []struct {
		name  string
		p     policy.Policy
		cause string
		want  policy.Kind
	}{
		{"allow", policy.AlwaysAllow(), "", policy.KindAllow},
		{"deny", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { return policy.Deny("no"), nil }), "", policy.KindDeny},
		{"approval", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) {
			return policy.RequireApproval(policy.Requirement{Name: "f", Version: 1}), nil
		}), "", policy.KindRequireApproval},
		{"error", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { return policy.Allow(), boom }), policy.CauseError, ""},
		{"panic", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { panic("bug") }), policy.CausePanic, ""},
		{"zero decision", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { return policy.Decision{}, nil }), policy.CauseInvalid, ""},
		{"nameless requirement", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) {
			return policy.RequireApproval(policy.Requirement{}), nil
		}), policy.CauseInvalid, ""},
		{"timeout", policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { <-block; return policy.Allow(), nil }), policy.CauseTimeout, ""},
		{"nil policy", nil, policy.CauseInvalid, ""},
	}
	for _, tt := range tests {
		timeout := 10 * time.Second // never reached by a policy that answers
		if tt.cause == policy.CauseTimeout {
			timeout = 20 * time.Millisecond
		}
		d, err := policy.Evaluate(context.Background(), tt.p, policy.Action{ActionID: "1/a"}, timeout)
		if tt.cause == "" {
			if err != nil || d.Kind() != tt.want {
				t.Errorf("%s: %v, %v", tt.name, d, err)
			}
			continue
		}
		var ee *policy.EvaluationError
		if !errors.As(err, &ee) || ee.Cause != tt.cause || ee.Action != "1/a" || d.Kind() != "" {
			t.Errorf("%s: %v, %v; want cause %s", tt.name, d, err, tt.cause)
		}
		if tt.cause == policy.CauseError && !errors.Is(err, boom) {
			t.Errorf("error cause does not wrap the policy's error")
		}
	}
}
