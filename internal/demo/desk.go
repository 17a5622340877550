package demo

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// AgentName is the demo agent's name; Approver the name of its (trusting)
// approver; Requirement the approval it asks for payments above 100.
const (
	// AgentName is the demo agent's name.
	AgentName = "payment-desk"
	// Approver is the demo's trusting approver: any credential is a reviewer.
	Approver = "desk"
	// Requirement is the approval payments above 100 EUR need.
	Requirement = "finance"
)

// LookupInvoice is lookup_invoice's input.
type LookupInvoice struct {
	ID string `json:"id" jsonschema:"the invoice id, such as INV-7"`
}

// Invoice is lookup_invoice's output.
type Invoice struct {
	ID       string `json:"id"`
	Payee    string `json:"payee"`
	Amount   int64  `json:"amount" jsonschema:"the amount in whole euros"`
	Currency string `json:"currency" enum:"EUR"`
}

// SendPayment is send_payment's input.
type SendPayment struct {
	Invoice  string `json:"invoice"`
	Payee    string `json:"payee"`
	Amount   int64  `json:"amount" jsonschema:"the amount in whole euros"`
	Currency string `json:"currency" enum:"EUR"`
}

// Payment is send_payment's output.
type Payment struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Refund is refund's input.
type Refund struct {
	Invoice string `json:"invoice"`
	Amount  int64  `json:"amount"`
}

// RefundDone is refund's output.
type RefundDone struct {
	ID string `json:"id"`
}

// The demo's invoices. INV-13's gateway always times out after sending:
// the payment's effect is uncertain and a person reconciles it.
var invoices = map[string]Invoice{
	"INV-7":  {ID: "INV-7", Payee: "ACME Ltd", Amount: 1200, Currency: "EUR"},
	"INV-8":  {ID: "INV-8", Payee: "Bolt GmbH", Amount: 45, Currency: "EUR"},
	"INV-13": {ID: "INV-13", Payee: "Unlucky SA", Amount: 80, Currency: "EUR"},
}

var (
	lookupDef = tools.Define[LookupInvoice, Invoice]("lookup_invoice", "Look up an invoice by id.")
	sendDef   = tools.Define[SendPayment, Payment]("send_payment", "Pay an invoice. Payments above 100 EUR need a finance approval.")
	refundDef = tools.Define[Refund, RefundDone]("refund", "Refund an invoice. The refund processor confirms asynchronously.")
)

var (
	errUnknownInvoice = errors.New("unknown invoice")
	errGatewayTimeout = errors.New("payment gateway timed out after the request was sent")
)

func classify(err error) tools.Failure {
	switch {
	case errors.Is(err, errUnknownInvoice):
		return tools.Explain("no invoice has this id")
	case errors.Is(err, errGatewayTimeout):
		return tools.Uncertain(err.Error())
	}
	return tools.Uncertain("unexpected error: " + err.Error())
}

// gateway is the fake payment gateway: idempotent by the action's key.
type gateway struct {
	mu       sync.Mutex
	payments map[string]Payment
}

func (g *gateway) pay(key string, in SendPayment) (Payment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.payments[key]; ok {
		return p, nil
	}
	// The payment's id comes from the action's idempotency key: stable
	// for the action, distinct across actions, runs and demo processes.
	p := Payment{ID: "PAY-" + strings.ToUpper(key[:10]), Status: "sent"}
	g.payments[key] = p
	if in.Invoice == "INV-13" {
		return Payment{}, errGatewayTimeout
	}
	return p, nil
}

// Tools returns the payment desk's tools: lookup_invoice (a replayable
// read, 3 attempts), send_payment (not replayable, 30 s timeout) and refund
// (a settling tool: its processor confirms asynchronously, so a body
// stopped at its 2 s timeout waits 30 s for the settlement).
func Tools() []tools.Tool {
	gw := &gateway{payments: map[string]Payment{}}
	lookup := tools.Bind(lookupDef, func(_ context.Context, _ tools.Call, in LookupInvoice) (Invoice, error) {
		inv, ok := invoices[in.ID]
		if !ok {
			return Invoice{}, errUnknownInvoice
		}
		return inv, nil
	}, classify)
	send := tools.Bind(sendDef, func(_ context.Context, call tools.Call, in SendPayment) (Payment, error) {
		return gw.pay(call.IdempotencyKey(), in)
	}, classify)
	refund := tools.BindSettling(refundDef, func(ctx context.Context, call tools.Call, in Refund, s *tools.Settler[RefundDone]) (RefundDone, error) {
		// The processor answers after 3 s, past the body's 2 s timeout: the
		// settlement arrives through the settler while the run waits.
		go func() {
			time.Sleep(3 * time.Second)
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Settle(sctx, RefundDone{ID: "refund-" + in.Invoice}, "refund of "+in.Invoice+" confirmed by the processor")
		}()
		<-ctx.Done()
		return RefundDone{}, ctx.Err()
	}, classify, 30*time.Second)
	return []tools.Tool{
		tools.WithReplay(lookup, 3),
		tools.WithTimeout(send, tools.After(30*time.Second)),
		tools.WithTimeout(refund, tools.After(2*time.Second)),
	}
}

// Policy allows lookups and refunds and asks for the finance approval for
// payments above 100 EUR.
func Policy() policy.Policy {
	return policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		pay, matched, err := tools.Input(sendDef, a)
		if err != nil {
			return policy.Decision{}, err
		}
		if matched && pay.Amount > 100 {
			return policy.RequireApproval(policy.Requirement{Name: Requirement, Version: 1}), nil
		}
		return policy.Allow(), nil
	})
}

var invoiceID = regexp.MustCompile(`INV-\d+`)

// ScriptedModel drives the desk offline: "pay invoice INV-7" looks the
// invoice up, pays it and reports; "refund INV-7" refunds it.
func ScriptedModel() model.Model {
	has := func(tool string) func(model.Request) bool {
		return func(req model.Request) bool { _, ok := model.ResultOf(req, tool); return ok }
	}
	input := func(req model.Request) string {
		if len(req.Transcript) > 0 {
			return req.Transcript[0].Text
		}
		return ""
	}
	return model.NewRules("payment-desk",
		model.Rule{Name: "report the refund", Match: has("refund"), Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			c, _ := model.ResultOf(req, "refund")
			return model.Answer("Refund result: "+string(c))(ctx, req)
		}},
		model.Rule{Name: "report the payment", Match: has("send_payment"), Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			c, _ := model.ResultOf(req, "send_payment")
			return model.Answer("Payment result: "+string(c))(ctx, req)
		}},
		model.Rule{Name: "pay the invoice", Match: has("lookup_invoice"), Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			c, _ := model.ResultOf(req, "lookup_invoice")
			var inv Invoice
			if err := json.Unmarshal(c, &inv); err != nil || inv.ID == "" {
				return model.Answer("I could not find that invoice: "+string(c))(ctx, req)
			}
			args, _ := json.Marshal(SendPayment{Invoice: inv.ID, Payee: inv.Payee, Amount: inv.Amount, Currency: inv.Currency})
			return model.CallTools(model.Call("send_payment", string(args)))(ctx, req)
		}},
		model.Rule{Name: "refund", Match: func(req model.Request) bool { return strings.Contains(strings.ToLower(input(req)), "refund") }, Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			id := invoiceID.FindString(input(req))
			args, _ := json.Marshal(Refund{Invoice: id, Amount: invoices[id].Amount})
			return model.CallTools(model.Call("refund", string(args)))(ctx, req)
		}},
		model.Rule{Name: "look the invoice up", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			id := invoiceID.FindString(input(req))
			if id == "" {
				return model.Answer("Tell me which invoice to pay, such as: pay invoice INV-7.")(ctx, req)
			}
			args, _ := json.Marshal(LookupInvoice{ID: id})
			return model.CallTools(model.Call("lookup_invoice", string(args)))(ctx, req)
		}},
	)
}

// Agent builds the payment desk agent on m (nil: the scripted model).
func Agent(m model.Model) (*agent.Agent, error) {
	return agentWith(m, approvers.Trusting(Approver))
}

// agentWith builds the payment desk agent on m with its approvers.
func agentWith(m model.Model, list ...*approvers.Approver) (*agent.Agent, error) {
	if m == nil {
		m = ScriptedModel()
	}
	return agent.New(AgentName, m, Tools(), Policy(),
		agent.WithSystem("You are a payment desk. Look invoices up before paying them."),
		agent.WithApprovers(list...),
	).Build()
}
