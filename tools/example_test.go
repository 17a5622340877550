package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// The payment desk: an agent that looks up invoices and pays them. These
// types and tools are shared by the examples of this package.

// LookupInvoice is the input of lookup_invoice.
type LookupInvoice struct {
	ID string `json:"id" jsonschema:"the invoice id, such as INV-7"`
}

// Invoice is what lookup_invoice returns.
type Invoice struct {
	ID          string `json:"id"`
	Payee       string `json:"payee"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency" enum:"EUR,USD"`
}

// SendPayment is the input of send_payment.
type SendPayment struct {
	Invoice     string  `json:"invoice" jsonschema:"the invoice id being paid"`
	Payee       string  `json:"payee"`
	AmountCents int64   `json:"amount_cents" jsonschema:"the amount, in cents"`
	Currency    string  `json:"currency" enum:"EUR,USD"`
	Memo        *string `json:"memo,omitempty" jsonschema:"an optional note for the payee"`
}

// Payment is what send_payment returns.
type Payment struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// errGatewayTimeout is the gateway's answer when it did not reply in time:
// the payment may or may not have been made.
var errGatewayTimeout = errors.New("payment gateway timed out")

// errUnknownInvoice means the invoice does not exist: nothing happened.
var errUnknownInvoice = errors.New("unknown invoice")

// gateway is an in-memory payment gateway that deduplicates requests by
// idempotency key, as real gateways do.
type gateway struct {
	mu       sync.Mutex
	payments map[string]Payment
	timeout  bool
}

func (g *gateway) pay(_ context.Context, key string, p SendPayment) (Payment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.payments == nil {
		g.payments = map[string]Payment{}
	}
	if done, ok := g.payments[key]; ok {
		return done, nil
	}
	pay := Payment{ID: fmt.Sprintf("pay-%d", len(g.payments)+1), Status: "sent"}
	g.payments[key] = pay
	if g.timeout {
		return Payment{}, errGatewayTimeout // sent, but the answer was lost
	}
	return pay, nil
}

var invoices = map[string]Invoice{
	"INV-7": {ID: "INV-7", Payee: "ACME Ltd", AmountCents: 120000, Currency: "EUR"},
	"INV-8": {ID: "INV-8", Payee: "Bolt GmbH", AmountCents: 4500, Currency: "EUR"},
}

var (
	lookupInvoice = tools.Define[LookupInvoice, Invoice]("lookup_invoice", "Look up an invoice by id.")
	sendPayment   = tools.Define[SendPayment, Payment]("send_payment", "Pay an invoice. Needs approval above 1000 EUR.")
)

// classifyPayment says what each error of the payment desk means.
func classifyPayment(err error) tools.Failure {
	switch {
	case errors.Is(err, errUnknownInvoice):
		return tools.Explain("no invoice has this id")
	case errors.Is(err, errGatewayTimeout):
		return tools.Uncertain("the gateway timed out after the payment request was sent")
	}
	return tools.Uncertain("unexpected error: " + err.Error())
}

// deskTools binds the payment desk's tools to a gateway.
func deskTools(gw *gateway) []tools.Tool {
	lookup := tools.Bind(lookupInvoice, func(_ context.Context, _ tools.Call, in LookupInvoice) (Invoice, error) {
		inv, ok := invoices[in.ID]
		if !ok {
			return Invoice{}, errUnknownInvoice
		}
		return inv, nil
	}, classifyPayment)
	send := tools.Bind(sendPayment, func(ctx context.Context, call tools.Call, in SendPayment) (Payment, error) {
		return gw.pay(ctx, call.IdempotencyKey(), in)
	}, classifyPayment)
	return []tools.Tool{
		tools.WithReplay(lookup, 3), // a read: safe to start again
		tools.WithTimeout(send, tools.After(30*time.Second)),
	}
}

// paymentPolicy allows everything but payments over 1000 EUR, which need the
// finance team's approval.
func paymentPolicy(_ context.Context, action policy.Action) (policy.Decision, error) {
	pay, matched, err := tools.Input(sendPayment, action)
	if err != nil {
		return policy.Decision{}, err // never allow what we cannot read
	}
	if matched && pay.AmountCents > 100000 {
		return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
	}
	return policy.Allow(), nil
}

// Example binds the payment desk's tools and shows what the model is told
// about one of them and what the runtime gets back from an invocation.
func Example() {
	desk := deskTools(&gateway{})
	send := desk[1]
	fmt.Println(send.Name(), send.MaxAttempts(), send.Timeout())
	fmt.Println(string(send.Spec().InputSchema))

	args, err := send.Validate(json.RawMessage(`{"invoice":"INV-8","payee":"Bolt GmbH","amount_cents":4500,"currency":"EUR"}`))
	if err != nil {
		panic(err)
	}
	r := send.Invoke(context.Background(), tools.Call{Run: "run-1", Action: "1/call_1", Attempt: 1}, args.JSON, tools.Settlement{})
	fmt.Println(r.Outcome, string(r.Content))
	// Output:
	// send_payment 1 30s
	// {"type":"object","properties":{"invoice":{"type":"string","description":"the invoice id being paid"},"payee":{"type":"string"},"amount_cents":{"type":"integer","description":"the amount, in cents"},"currency":{"type":"string","enum":["EUR","USD"]},"memo":{"type":["null","string"],"description":"an optional note for the payee"}},"required":["invoice","payee","amount_cents","currency"],"additionalProperties":false}
	// output {"id":"pay-1","status":"sent"}
}

// ExampleBind shows classify at work: an unknown invoice is a definite
// failure the model can act on, a gateway timeout an uncertain effect that
// waits for a person.
func ExampleBind() {
	gw := &gateway{timeout: true}
	desk := deskTools(gw)
	ctx := context.Background()
	call := tools.Call{Run: "run-1", Action: "1/call_1", Attempt: 1}

	r := desk[0].Invoke(ctx, call, json.RawMessage(`{"id":"INV-404"}`), tools.Settlement{})
	fmt.Println(r.Outcome, string(r.Content))

	r = desk[1].Invoke(ctx, call, json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount_cents":120000,"currency":"EUR"}`), tools.Settlement{})
	fmt.Println(r.Outcome, r.Evidence)
	// Output:
	// explain {"error":"no invoice has this id"}
	// uncertain the gateway timed out after the payment request was sent
}

// ExampleInput shows the payment policy's typed match: a read is allowed, a
// small payment is allowed, a large one needs approval.
func ExampleInput() {
	ctx := context.Background()
	for _, a := range []policy.Action{
		{Run: "run-1", ActionID: "1/a", Tool: "lookup_invoice", Arguments: json.RawMessage(`{"id":"INV-7"}`)},
		{Run: "run-1", ActionID: "2/a", Tool: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-8","payee":"Bolt GmbH","amount_cents":4500,"currency":"EUR"}`)},
		{Run: "run-1", ActionID: "2/b", Tool: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount_cents":120000,"currency":"EUR"}`)},
		{Run: "run-1", ActionID: "2/c", Tool: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-7","to":"someone"}`)},
	} {
		d, err := paymentPolicy(ctx, a)
		fmt.Println(a.ActionID, d, err != nil)
	}
	// Output:
	// 1/a allow false
	// 2/a allow false
	// 2/b require_approval(finance v1) false
	// 2/c invalid true
}

// ExampleBindSettling binds a payment whose gateway confirms by callback:
// when the body is stopped before the confirmation, the run waits up to
// two minutes for the settlement the callback makes.
func ExampleBindSettling() {
	confirmations := make(chan Payment, 1)
	settled := make(chan struct{})
	send := tools.BindSettling(sendPayment,
		func(ctx context.Context, call tools.Call, in SendPayment, s *tools.Settler[Payment]) (Payment, error) {
			go func() {
				// The gateway's callback arrives later, maybe after the body
				// was stopped; settling records it either way.
				p := <-confirmations
				err := s.Settle(context.Background(), p, "payment "+p.ID+" for "+in.Invoice)
				fmt.Println("settle:", err)
				close(settled)
			}()
			select {
			case <-ctx.Done():
				return Payment{}, ctx.Err()
			case <-time.After(time.Hour):
				return Payment{}, errGatewayTimeout
			}
		},
		classifyPayment, 2*time.Minute)

	settlement := tools.NewSettlement("run-1", "1/call_1", func(_ context.Context, r tools.Result, summary string) error {
		fmt.Println("recorded:", r.Outcome, string(r.Content), "-", summary)
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	stop() // the run was cancelled while the body ran
	r := send.Invoke(ctx, tools.Call{Run: "run-1", Action: "1/call_1", Attempt: 1},
		json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount_cents":120000,"currency":"EUR"}`), settlement)
	fmt.Println("body:", r.Outcome)
	confirmations <- Payment{ID: "pay-9", Status: "sent"}
	<-settled
	// Output:
	// body: uncertain
	// recorded: output {"id":"pay-9","status":"sent"} - payment pay-9 for INV-7
	// settle: <nil>
}

// ExampleIdempotencyKey shows that every attempt of one action sends the
// gateway the same key, so a replayed payment is made once.
func ExampleIdempotencyKey() {
	gw := &gateway{}
	send := deskTools(gw)[1]
	args := json.RawMessage(`{"invoice":"INV-8","payee":"Bolt GmbH","amount_cents":4500,"currency":"EUR"}`)
	for attempt := 1; attempt <= 2; attempt++ {
		r := send.Invoke(context.Background(), tools.Call{Run: "run-1", Action: "1/call_1", Attempt: attempt}, args, tools.Settlement{})
		fmt.Println(attempt, string(r.Content))
	}
	fmt.Println(len(gw.payments), "payment made")
	// Output:
	// 1 {"id":"pay-1","status":"sent"}
	// 2 {"id":"pay-1","status":"sent"}
	// 1 payment made
}

// ExampleReconciliation builds the content a person records for an
// uncertain payment: what happened, that it failed, or that nobody knows
// yet.
func ExampleReconciliation() {
	paid, _ := tools.Reconciliation(sendPayment, Payment{ID: "pay-3", Status: "sent"})
	fmt.Println(string(paid))
	fmt.Println(string(tools.FailedReconciliation("the gateway rejected the payment")))
	fmt.Println(string(tools.Unconfirmed("finance is checking with the bank")))
	// Output:
	// {"id":"pay-3","status":"sent"}
	// {"error":"the gateway rejected the payment"}
	// {"unconfirmed":"finance is checking with the bank"}
}
