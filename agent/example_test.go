package agent_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

type LookupInvoice struct {
	ID string `json:"id" jsonschema:"the invoice id, such as INV-7"`
}

type Invoice struct {
	ID          string `json:"id"`
	Payee       string `json:"payee"`
	AmountCents int64  `json:"amount_cents"`
}

type SendPayment struct {
	Invoice     string `json:"invoice"`
	Payee       string `json:"payee"`
	AmountCents int64  `json:"amount_cents"`
}

type Payment struct {
	ID string `json:"id"`
}

type Summary struct {
	Paid    bool   `json:"paid"`
	Payment string `json:"payment,omitempty"`
}

var (
	lookupInvoice = tools.Define[LookupInvoice, Invoice]("lookup_invoice", "Look up an invoice by id.")
	sendPayment   = tools.Define[SendPayment, Payment]("send_payment", "Pay an invoice.")
	errTimeout    = errors.New("gateway timeout")
)

func classifyPayment(err error) tools.Failure {
	if errors.Is(err, errTimeout) {
		return tools.Uncertain("the gateway timed out after the request was sent")
	}
	return tools.Explain(err.Error())
}

// Example defines the payment desk agent: a replayable read, a payment that
// needs approval above 1000 EUR, a typed summary as the final answer.
func Example() {
	lookup := tools.Bind(lookupInvoice, func(_ context.Context, _ tools.Call, in LookupInvoice) (Invoice, error) {
		return Invoice{ID: in.ID, Payee: "ACME Ltd", AmountCents: 120000}, nil
	}, classifyPayment)
	send := tools.Bind(sendPayment, func(_ context.Context, call tools.Call, in SendPayment) (Payment, error) {
		return Payment{ID: "pay-" + call.IdempotencyKey()[:8]}, nil
	}, classifyPayment)

	desk := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		pay, matched, err := tools.Input(sendPayment, a)
		if err != nil {
			return policy.Decision{}, err
		}
		if matched && pay.AmountCents > 100000 {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})

	a, err := agent.New("payment-desk",
		model.NewScripted("demo", model.Answer(`{"paid":false}`)),
		[]tools.Tool{tools.WithReplay(lookup, 3), tools.WithTimeout(send, tools.After(30*time.Second))},
		desk,
		agent.WithVersion("2"),
		agent.WithSystem("You pay invoices. Never pay one twice."),
		agent.WithApprovers(approvers.Trusting("demo-approver")),
		agent.WithTypedAnswer[Summary](),
		agent.WithMaxTurns(6),
	).Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Ref(), len(a.Tools()), "tools")
	fmt.Printf("%+v\n", a.Limits())
	fmt.Println(string(a.AnswerSchema()))
	answer, err := a.DecodeAnswer(`{"paid": true, "payment": "pay-1"}`)
	fmt.Println(string(answer), err)
	// Output:
	// {payment-desk 2} 2 tools
	// {MaxTurns:6 MaxConcurrency:4 TokenBudget:0 ModelTimeout:600000 ModelRetryDelay:200 ToolTimeout:60000 MaxResultBytes:1048576 PolicyTimeout:5000 CommandTimeout:5000 ApprovalExpiry:604800000 AnswerAttempts:2 MaxChildren:4 MaxDepth:1}
	// {"type":"object","properties":{"paid":{"type":"boolean"},"payment":{"type":"string"}},"required":["paid"],"additionalProperties":false}
	// {"paid":true,"payment":"pay-1"} <nil>
}

// ExampleDefinition_Build shows every problem of a definition reported at
// once.
func ExampleDefinition_Build() {
	lookup := tools.Bind(lookupInvoice, func(context.Context, tools.Call, LookupInvoice) (Invoice, error) {
		return Invoice{}, nil
	}, classifyPayment)
	_, err := agent.New("payment-desk", model.NewScripted("demo"),
		[]tools.Tool{tools.WithReplay(lookup, 0), lookup},
		policy.AlwaysAllow(),
		agent.WithMaxTurns(0),
		agent.WithToolTimeout(tools.After(time.Microsecond)),
	).Build()
	fmt.Println(err)
	// Output:
	// agent "payment-desk": 4 problem(s):
	//   WithMaxTurns(0): out of range 1..9007199254740991
	//   WithToolTimeout(1µs): out of range 1ms..4294967295ms or infinity
	//   tool "lookup_invoice": tools.WithReplay(0): out of range 1..100
	//   tool "lookup_invoice": tools #0 and #1 share the name
}
