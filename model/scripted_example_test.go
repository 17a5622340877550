package model_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/weftrun/weft/model"
)

// payDesk returns rules that drive the payment desk offline: "pay invoice
// INV-7" looks the invoice up, pays it, then reports what happened.
func payDesk() *model.Scripted {
	invoiceID := regexp.MustCompile(`INV-\d+`)
	has := func(tool string) func(model.Request) bool {
		return func(req model.Request) bool { _, ok := model.ResultOf(req, tool); return ok }
	}
	return model.NewRules("payment-desk",
		model.Rule{
			Name:  "report the payment",
			Match: has("send_payment"),
			Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
				content, _ := model.ResultOf(req, "send_payment")
				var r struct {
					ID          string `json:"id"`
					Error       string `json:"error"`
					Detail      string `json:"detail"`
					Unconfirmed string `json:"unconfirmed"`
				}
				_ = json.Unmarshal(content, &r)
				switch {
				case r.Error != "":
					return model.Answer(fmt.Sprintf("The payment was not made (%s %s).", r.Error, r.Detail))(ctx, req)
				case r.Unconfirmed != "":
					return model.Answer("The payment may or may not have been made: "+r.Unconfirmed)(ctx, req)
				}
				return model.Answer("Paid, payment "+r.ID+".")(ctx, req)
			},
		},
		model.Rule{
			Name:  "pay the invoice",
			Match: has("lookup_invoice"),
			Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
				content, _ := model.ResultOf(req, "lookup_invoice")
				var inv struct {
					ID          string `json:"id"`
					Payee       string `json:"payee"`
					AmountCents int64  `json:"amount_cents"`
					Currency    string `json:"currency"`
					Error       string `json:"error"`
				}
				if err := json.Unmarshal(content, &inv); err != nil || inv.Error != "" {
					return model.Answer("I could not find that invoice.")(ctx, req)
				}
				args, _ := json.Marshal(map[string]any{"invoice": inv.ID, "payee": inv.Payee, "amount_cents": inv.AmountCents, "currency": inv.Currency})
				return model.CallTools(model.Call("send_payment", string(args)))(ctx, req)
			},
		},
		model.Rule{
			Name: "look the invoice up",
			Match: func(req model.Request) bool {
				return invoiceID.MatchString(model.Input(req)) && strings.Contains(strings.ToLower(model.Input(req)), "pay")
			},
			Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
				id := invoiceID.FindString(model.Input(req))
				return model.CallTools(model.Call("lookup_invoice", `{"id":"`+id+`"}`))(ctx, req)
			},
		},
	)
}

// ExampleNewRules drives the payment desk through its three turns, feeding
// tool results back by hand as the runtime would.
func ExampleNewRules() {
	m := payDesk()
	ctx := context.Background()
	transcript := []model.Message{{Role: model.RoleUser, Text: "Please pay invoice INV-7."}}
	results := map[string]string{
		"lookup_invoice": `{"id":"INV-7","payee":"ACME Ltd","amount_cents":120000,"currency":"EUR"}`,
		"send_payment":   `{"id":"pay-1","status":"sent"}`,
	}
	for turn := 1; ; turn++ {
		reply, err := m.Complete(ctx, model.Request{Run: "run-1", Turn: turn, Transcript: transcript})
		if err != nil {
			fmt.Println(err)
			return
		}
		if reply.Kind == model.ReplyFinalAnswer {
			fmt.Println(turn, "answer:", reply.Turn.Text)
			return
		}
		transcript = append(transcript, reply.Turn)
		tool := model.Message{Role: model.RoleTool}
		for _, c := range reply.Turn.Calls {
			fmt.Println(turn, "call:", c.ID, c.Name, string(c.Arguments))
			tool.Results = append(tool.Results, model.ToolResult{CallID: c.ID, Name: c.Name, Content: json.RawMessage(results[c.Name])})
		}
		transcript = append(transcript, tool)
	}
	// Output:
	// 1 call: call_1_1 lookup_invoice {"id":"INV-7"}
	// 2 call: call_2_1 send_payment {"amount_cents":120000,"currency":"EUR","invoice":"INV-7","payee":"ACME Ltd"}
	// 3 answer: Paid, payment pay-1.
}

// ExampleNewScripted scripts a model turn by turn: a timeout on the first
// call (the runtime's model timeout stops it), then an answer.
func ExampleNewScripted() {
	m := model.NewScripted("flaky", model.Hang(), model.Answer("42"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Complete(ctx, model.Request{Turn: 1})
	fmt.Println(err)
	r, _ := m.Complete(context.Background(), model.Request{Turn: 2})
	fmt.Println(r.Kind, r.Turn.Text, r.Usage.Total())
	// Output:
	// model timed_out: context canceled
	// final_answer 42 15
}
