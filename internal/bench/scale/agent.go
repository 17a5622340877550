package scale

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// AgentName is the agent of every run of the scale test: its first turn
// calls the tool "step" once, under a policy that requires an approval
// (requirement "scale" version 1, answered by the trusting approver
// "scale"); once the step ran, its second turn answers "done". Its
// approval requests never expire (an expiry would need a durable timer
// per suspended run, which the loader does not arm).
const AgentName = "scale-approve"

// ApproverName is the approver of AgentName's approvals.
const ApproverName = "scale"

// requirement is what AgentName's policy asks for.
var requirement = policy.Requirement{Name: "scale", Version: 1}

type stepIn struct {
	N int `json:"n"`
}

type stepOut struct {
	OK bool `json:"ok"`
}

var stepDef = tools.Define[stepIn, stepOut]("step", "One instant durable step that needs an approval.")

// input is the input of every run: about the size of a short request.
var input = "Please refund invoice INV-20931 to the customer's card on file; amount 182.40 EUR. " +
	"The customer wrote twice about the double charge on 2026-11-28."

// assistantText is the assistant text of the tool-requesting turn.
var assistantText = "I will refund invoice INV-20931 (182.40 EUR) to the card on file; this needs an approval first. " +
	strings.Repeat("Checked the double charge against the ledger. ", 3)

// scaleModel answers AgentName from the request alone.
type scaleModel struct{}

func (scaleModel) Name() string { return "scale:approve" }

func (scaleModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	return reply(req.Turn), nil
}

// reply is the model's reply for turn: a call of "step" on turn 1, the
// final answer after.
func reply(turn int) model.Reply {
	u := &model.Usage{InputTokens: 420, OutputTokens: 60}
	if turn <= 1 {
		return model.Reply{Kind: model.ReplyToolRequest, Usage: u, Turn: model.Message{Role: model.RoleAssistant, Text: assistantText,
			Calls: []model.ToolCall{{ID: "c1", Name: "step", Arguments: json.RawMessage(`{"n":` + strconv.Itoa(turn) + `}`)}}}}
	}
	return model.Reply{Kind: model.ReplyFinalAnswer, Usage: u, Turn: model.Message{Role: model.RoleAssistant, Text: "Refunded INV-20931: done."}}
}

func requireApproval(context.Context, policy.Action) (policy.Decision, error) {
	return policy.RequireApproval(requirement), nil
}

// Agent builds AgentName. Every process of the scale test builds it the
// same way (a run continues only under its agent identity).
func Agent() (*agent.Agent, error) {
	step := tools.Bind(stepDef, func(context.Context, tools.Call, stepIn) (stepOut, error) { return stepOut{OK: true}, nil },
		func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	return agent.New(AgentName, scaleModel{}, []tools.Tool{step}, policy.Func(requireApproval),
		agent.WithApprovers(approvers.Trusting(ApproverName)), agent.WithApprovalExpiry(tools.Infinity())).Build()
}
