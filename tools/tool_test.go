package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"", false},
		{"a", true},
		{"lookup_invoice", true},
		{"send-payment", true},
		{"Tool9", true},
		{"0", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"with space", false},
		{"dot.name", false},
		{"slash/name", false},
		{"colon:name", false},
		{"ünïcode", false},
		{"tab\t", false},
		{"star*", false},
		{">", false},
	}
	for _, tt := range tests {
		if got := tools.ValidName(tt.name); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIdempotencyKeyFraming(t *testing.T) {
	key := func(run, action string) string {
		return tools.IdempotencyKey(tools.Call{Run: run, Action: action})
	}
	distinct := []struct{ a, b [2]string }{
		// The docs/semantics.md §3 example ("r-1",2,"c") vs ("r",1,"2-c"), as
		// run + action ids.
		{[2]string{"r-1", "2/c"}, [2]string{"r", "1/2-c"}},
		// Concatenation with the separator would collide here.
		{[2]string{"a", "b/c"}, [2]string{"a/b", "c"}},
		{[2]string{"ab", "1/c"}, [2]string{"a", "b1/c"}},
		{[2]string{"r", "1/\"x\""}, [2]string{"r\"", "1/x"}},
		{[2]string{"r", ""}, [2]string{"", "r"}},
		{[2]string{"r", "1/c"}, [2]string{"r", "2/c"}},
	}
	for _, tt := range distinct {
		if ka, kb := key(tt.a[0], tt.a[1]), key(tt.b[0], tt.b[1]); ka == kb {
			t.Errorf("IdempotencyKey%v == IdempotencyKey%v = %s", tt.a, tt.b, ka)
		}
	}
	// Stable across attempts and correlation: only run and action count.
	base := tools.Call{Run: "r-1", Action: "2/c", Attempt: 1, Correlation: "x"}
	again := tools.Call{Run: "r-1", Action: "2/c", Attempt: 3, Correlation: "y"}
	if tools.IdempotencyKey(base) != tools.IdempotencyKey(again) || base.IdempotencyKey() != tools.IdempotencyKey(base) {
		t.Error("key changed with attempt or correlation")
	}
	// The format is part of the protocol: hex SHA-256 of ["weft.idempotency.v1", run, action].
	// sha256(`["weft.idempotency.v1","r-1","2/c"]`), pinned so that a change
	// of format (which would repeat external effects) fails here.
	const want = "af347e018c2f4a5551fbdf861d5b1628b97cc641bab06e26e0b9d535c606eb4f"
	if got := key("r-1", "2/c"); got != want {
		t.Errorf("key = %s, want %s", got, want)
	}
}

type lookup struct {
	ID string `json:"id"`
}

type invoice struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

var lookupDef = tools.Define[lookup, invoice]("lookup_invoice", "Look up an invoice.")

func TestInputMatch(t *testing.T) {
	otherDef := tools.Define[struct {
		Number int `json:"number"`
	}, invoice]("lookup_invoice", "The same name, another input type.")
	tests := []struct {
		name        string
		action      policy.Action
		wantMatched bool
		wantErr     bool
		wantID      string
	}{
		{"another tool: not matched", policy.Action{Tool: "send_payment", Arguments: json.RawMessage(`{"x":1}`)}, false, false, ""},
		{"this tool: matched value", policy.Action{Tool: "lookup_invoice", ActionID: "1/a", Arguments: json.RawMessage(`{"id":"INV-7"}`)}, true, false, "INV-7"},
		{"this name, drifted definition: error", policy.Action{Tool: "lookup_invoice", ActionID: "1/b", Arguments: json.RawMessage(`{"number":7}`)}, true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, matched, err := tools.Input(lookupDef, tt.action)
			if matched != tt.wantMatched || (err != nil) != tt.wantErr || in.ID != tt.wantID {
				t.Errorf("Input = (%+v, %v, %v), want (id %q, %v, err %v)", in, matched, err, tt.wantID, tt.wantMatched, tt.wantErr)
			}
			if err != nil {
				var ve *tools.ValidationError
				if !errors.As(err, &ve) || ve.Reason != `unexpected additional properties ["number"]` {
					t.Errorf("drift error %v does not carry the validation detail", err)
				}
			}
		})
	}
	// And the reverse drift: otherDef reading an action validated by lookupDef.
	if _, matched, err := tools.Input(otherDef, policy.Action{Tool: "lookup_invoice", Arguments: json.RawMessage(`{"id":"INV-7"}`)}); !matched || err == nil {
		t.Errorf("reverse drift: matched %v, err %v; want matched with an error", matched, err)
	}
}

var errGateway = errors.New("gateway timeout")
var errNotFound = errors.New("not found")

func classify(err error) tools.Failure {
	switch {
	case errors.Is(err, errGateway):
		return tools.Uncertain("gateway timed out after the request was sent")
	case errors.Is(err, errNotFound):
		return tools.Explain("no such invoice")
	}
	return tools.Failure{}
}

func TestInvokeOutcomes(t *testing.T) {
	ctx := context.Background()
	call := tools.Call{Run: "r", Action: "1/c", Attempt: 1}
	tool := tools.Bind(lookupDef, func(_ context.Context, c tools.Call, in lookup) (invoice, error) {
		switch in.ID {
		case "INV-7":
			return invoice{ID: in.ID, Amount: 1200}, nil
		case "missing":
			return invoice{}, errNotFound
		case "slow":
			return invoice{}, errGateway
		case "odd":
			return invoice{}, errors.New("odd")
		case "boom":
			panic("boom")
		}
		if c.Attempt != 1 {
			t.Errorf("handler got call %+v", c)
		}
		return invoice{}, nil
	}, classify)
	tests := []struct {
		args     string
		outcome  string
		content  string
		message  string
		evidence string
	}{
		{`{"id":"INV-7"}`, events.OutcomeOutput, `{"id":"INV-7","amount":1200}`, "", ""},
		{`{"id":"missing"}`, events.OutcomeExplain, `{"error":"no such invoice"}`, "no such invoice", ""},
		{`{"id":"slow"}`, events.OutcomeUncertain, ``, "", "gateway timed out after the request was sent"},
		{`{"id":"odd"}`, events.OutcomeUncertain, ``, "", "the error was classified as neither Explain nor Uncertain"},
		{`{"id":"boom"}`, events.OutcomeUncertain, ``, "", "the tool body panicked: boom"},
		// Invoke decodes arguments Validate accepted, once, without
		// validating them again (docs/adr/0022); what does not decode, or
		// names a property the input type does not have, is still refused.
		{`{"id":1}`, events.OutcomeExplain, `{"error":"invalid arguments: /id: cannot decode number into string"}`, "invalid arguments: /id: cannot decode number into string", ""},
		{`{"id":"INV-7","extra":1}`, events.OutcomeExplain, `{"error":"invalid arguments: /: json: unknown field \"extra\""}`, `invalid arguments: /: json: unknown field "extra"`, ""},
	}
	for _, tt := range tests {
		r := tool.Invoke(ctx, call, json.RawMessage(tt.args), tools.Settlement{})
		if r.Outcome != tt.outcome || string(r.Content) != tt.content || r.Message != tt.message || !strings.HasPrefix(r.Evidence, tt.evidence) {
			t.Errorf("Invoke(%s) = %+v, want outcome %s content %s message %q evidence %q", tt.args, r, tt.outcome, tt.content, tt.message, tt.evidence)
		}
	}
	t.Run("classify panics", func(t *testing.T) {
		bad := tools.Bind(lookupDef, func(context.Context, tools.Call, lookup) (invoice, error) { return invoice{}, errGateway },
			func(error) tools.Failure { panic("classify bug") })
		r := bad.Invoke(ctx, call, json.RawMessage(`{"id":"x"}`), tools.Settlement{})
		if r.Outcome != events.OutcomeUncertain || !strings.Contains(r.Evidence, "classify panicked") {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("output that cannot be encoded", func(t *testing.T) {
		def := tools.Define[lookup, float64]("ratio", "r")
		nan := tools.Bind(def, func(context.Context, tools.Call, lookup) (float64, error) { return zeroDiv(), nil }, classify)
		r := nan.Invoke(ctx, call, json.RawMessage(`{"id":"x"}`), tools.Settlement{})
		if r.Outcome != events.OutcomeUncertain || !strings.Contains(r.Evidence, "could not be encoded") {
			t.Errorf("got %+v", r)
		}
	})
}

func zeroDiv() float64 {
	z := 0.0
	return z / z
}

func TestSettingsAreCopies(t *testing.T) {
	base := tools.Bind(lookupDef, func(context.Context, tools.Call, lookup) (invoice, error) { return invoice{}, nil }, classify)
	replay := tools.WithReplay(base, 3)
	timed := tools.WithTimeout(replay, tools.After(2*time.Second))
	inf := tools.WithTimeout(base, tools.Infinity())
	if base.MaxAttempts() != 1 || !base.Timeout().IsZero() || base.Settling() || base.SettleWithin() != 0 {
		t.Errorf("base settings changed: %d %v", base.MaxAttempts(), base.Timeout())
	}
	if replay.MaxAttempts() != 3 || !replay.Timeout().IsZero() {
		t.Errorf("replay: %d %v", replay.MaxAttempts(), replay.Timeout())
	}
	if d, ok := timed.Timeout().Duration(); timed.MaxAttempts() != 3 || !ok || d != 2*time.Second || timed.Timeout().Millis() != 2000 {
		t.Errorf("timed: %d %v", timed.MaxAttempts(), timed.Timeout())
	}
	if !inf.Timeout().IsInfinite() || inf.Timeout().Millis() != events.Infinite || inf.Timeout().String() != "infinity" {
		t.Errorf("infinity: %v", inf.Timeout())
	}
	if base.Name() != "lookup_invoice" || base.Spec().Description != "Look up an invoice." || string(base.Spec().InputSchema) != string(lookupDef.Input().Schema()) {
		t.Errorf("spec: %+v", base.Spec())
	}
	norm, err := base.Validate(json.RawMessage(`{ "id" : "INV-7" }`))
	if err != nil || string(norm.JSON) != `{"id":"INV-7"}` {
		t.Errorf("Validate = %s, %v", norm.JSON, err)
	}
}

type payment struct {
	ID string `json:"id"`
}

func TestSettlement(t *testing.T) {
	ctx := context.Background()
	if err := (tools.Settlement{}).Settle(ctx, tools.OutputResult(json.RawMessage(`{}`)), "s"); !errors.Is(err, &weft.Error{Code: weft.CodeNotAwaited}) {
		t.Errorf("zero Settlement: %v, want not_awaited", err)
	}
	def := tools.Define[lookup, payment]("pay", "Pay.")
	var got []tools.Result
	var summaries []string
	s := tools.NewSettlement("r-1", "1/c", func(_ context.Context, r tools.Result, summary string) error {
		got = append(got, r)
		summaries = append(summaries, summary)
		if len(got) > 1 {
			return &weft.Error{Code: weft.CodeAlreadyRecorded}
		}
		return nil
	})
	if s.Run() != "r-1" || s.Action() != "1/c" {
		t.Errorf("settlement ids %s %s", s.Run(), s.Action())
	}
	tool := tools.BindSettling(def, func(ctx context.Context, c tools.Call, in lookup, st *tools.Settler[payment]) (payment, error) {
		if st.Run() != "r-1" || st.Action() != "1/c" {
			t.Errorf("settler ids %s %s", st.Run(), st.Action())
		}
		if err := st.Settle(ctx, payment{ID: "p-1"}, "paid p-1"); err != nil {
			t.Errorf("first settle: %v", err)
		}
		if err := st.Fail(ctx, tools.Explain("declined"), "declined"); !errors.Is(err, &weft.Error{Code: weft.CodeAlreadyRecorded}) {
			t.Errorf("second settle: %v", err)
		}
		return payment{ID: "p-1"}, nil
	}, classify, 20*time.Millisecond)
	if !tool.Settling() || tool.SettleWithin() != 20*time.Millisecond {
		t.Errorf("settling settings: %v %v", tool.Settling(), tool.SettleWithin())
	}
	r := tool.Invoke(ctx, tools.Call{Run: "r-1", Action: "1/c", Attempt: 1}, json.RawMessage(`{"id":"x"}`), s)
	if r.Outcome != events.OutcomeOutput || string(r.Content) != `{"id":"p-1"}` {
		t.Errorf("result %+v", r)
	}
	if len(got) != 2 || string(got[0].Content) != `{"id":"p-1"}` || got[1].Outcome != events.OutcomeExplain || string(got[1].Content) != `{"error":"declined"}` {
		t.Errorf("settlements %+v", got)
	}
	if summaries[0] != "paid p-1" {
		t.Errorf("summary %q", summaries[0])
	}
}

func TestReconciliationContent(t *testing.T) {
	def := tools.Define[lookup, payment]("pay", "Pay.")
	c, err := tools.Reconciliation(def, payment{ID: "p-9"})
	if err != nil || string(c) != `{"id":"p-9"}` {
		t.Errorf("Reconciliation = %s, %v", c, err)
	}
	if got := string(tools.FailedReconciliation(`card "declined"`)); got != `{"error":"card \"declined\""}` {
		t.Errorf("FailedReconciliation = %s", got)
	}
	if got := string(tools.Unconfirmed("finance is checking")); got != `{"unconfirmed":"finance is checking"}` {
		t.Errorf("Unconfirmed = %s", got)
	}
}

func TestEmptyExplainIsStillExplain(t *testing.T) {
	r := tools.FailureResult(tools.Explain(""))
	if r.Outcome != events.OutcomeExplain || string(r.Content) != `{"error":""}` {
		t.Errorf("Explain(\"\") = %+v", r)
	}
	if r := tools.FailureResult(tools.Failure{}); r.Outcome != events.OutcomeUncertain {
		t.Errorf("zero Failure = %+v", r)
	}
	if f := tools.Uncertain("e"); !f.IsUncertain() || f.Text() != "e" {
		t.Errorf("Uncertain accessors: %v %q", f.IsUncertain(), f.Text())
	}
}

func TestConcurrentInvoke(t *testing.T) {
	tool := tools.Bind(lookupDef, func(_ context.Context, c tools.Call, in lookup) (invoice, error) {
		return invoice{ID: in.ID + c.Action}, nil
	}, classify)
	done := make(chan string, 16)
	for i := range 16 {
		go func() {
			action := string(rune('a' + i))
			args, err := tool.Validate(json.RawMessage(`{"id":"x"}`))
			if err != nil {
				done <- err.Error()
				return
			}
			r := tool.Invoke(context.Background(), tools.Call{Run: "r", Action: action}, args.JSON, tools.Settlement{})
			done <- string(r.Content)
		}()
	}
	seen := map[string]bool{}
	for range 16 {
		seen[<-done] = true
	}
	if len(seen) != 16 {
		t.Errorf("results %v", seen)
	}
}
