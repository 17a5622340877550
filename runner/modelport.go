package runner

import (
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// This file is the one place where the model port's Go types (package
// model) meet the log's (package events, docs/adr/0018): the decision core
// speaks only the log's (docs/adr/0037), so a reply or a failure becomes
// a command in the log's types here, and the recorded transcript becomes
// the model's request here. Every known kind and role is mapped by name, so a
// renamed or revalued constant on either side fails
// TestModelPortConversions instead of silently changing what the log
// holds.

// modelRequest is the model request of the run's current turn, rebuilt
// from its state: run, turn, correlation and aggregate.Transcript. The
// caller adds the agent's System prompt, Tools and AnswerSchema
// (agent.Agent.Request).
func modelRequest(s aggregate.State) model.Request {
	return model.Request{
		Run:         s.Run(),
		Turn:        int(s.Turn()),
		Correlation: s.Started().Correlation,
		Transcript:  modelMessages(aggregate.Transcript(s)),
	}
}

// ReplyCommand is the command for the model's reply r to turn, in the
// core's types: what the runner decides when the model answers (a load
// generator that plays a runner builds it the same way).
func ReplyCommand(turn int64, r model.Reply) aggregate.ModelReply {
	return aggregate.ModelReply{Turn: turn, Reply: aggregate.Reply{Kind: replyKind(r.Kind), Turn: eventMessage(r.Turn),
		Reason: r.Reason, Usage: eventUsage(r.Usage)}}
}

// replyKind maps a model reply kind to the log's. A kind the port does not
// define is recorded as reported: Decide refuses it (model_protocol_violation).
func replyKind(k model.ReplyKind) events.ReplyKind {
	switch k {
	case model.ReplyFinalAnswer:
		return events.ReplyFinalAnswer
	case model.ReplyToolRequest:
		return events.ReplyToolRequest
	case model.ReplyRefusal:
		return events.ReplyRefusal
	case model.ReplyTruncated:
		return events.ReplyTruncated
	}
	return events.ReplyKind(k)
}

// failureKind maps a model failure kind to the log's; an undefined kind is
// recorded as reported (it is not retryable).
func failureKind(k model.ErrorKind) events.FailureKind {
	switch k {
	case model.ErrUnreachable:
		return events.FailureUnreachable
	case model.ErrTimedOut:
		return events.FailureTimedOut
	case model.ErrRateLimited:
		return events.FailureRateLimited
	case model.ErrOverloaded:
		return events.FailureOverloaded
	case model.ErrRejected:
		return events.FailureRejected
	case model.ErrInvalidRequest:
		return events.FailureInvalidRequest
	case model.ErrInvalidReply:
		return events.FailureInvalidReply
	case model.ErrCrashed:
		return events.FailureCrashed
	case model.ErrOther:
		return events.FailureOther
	}
	return events.FailureKind(k)
}

// eventRole maps a model message's role to the log's. A role the port does
// not define is recorded as written.
func eventRole(r model.Role) events.Role {
	switch r {
	case model.RoleUser:
		return events.RoleUser
	case model.RoleAssistant:
		return events.RoleAssistant
	case model.RoleTool:
		return events.RoleTool
	}
	return events.Role(r)
}

// modelRole maps a recorded role to the model port's, so that a request
// carries the port's values whatever the log stores (a role the log does
// not define is passed on as stored).
func modelRole(r events.Role) model.Role {
	switch r {
	case events.RoleUser:
		return model.RoleUser
	case events.RoleAssistant:
		return model.RoleAssistant
	case events.RoleTool:
		return model.RoleTool
	}
	return model.Role(r)
}

// eventMessage is the log's form of a model message.
func eventMessage(m model.Message) events.Message {
	out := events.Message{Role: eventRole(m.Role), Text: m.Text, Calls: eventCalls(m.Calls), ProviderData: m.ProviderData}
	for _, r := range m.Results {
		out.Results = append(out.Results, events.ToolResult{CallID: r.CallID, Name: r.Name, Content: r.Content})
	}
	return out
}

// modelMessages is the model port's form of a transcript.
func modelMessages(ms []events.Message) []model.Message {
	out := make([]model.Message, len(ms))
	for i, m := range ms {
		out[i] = model.Message{Role: modelRole(m.Role), Text: m.Text, Calls: modelCalls(m.Calls), ProviderData: m.ProviderData}
		for _, r := range m.Results {
			out[i].Results = append(out[i].Results, model.ToolResult{CallID: r.CallID, Name: r.Name, Content: r.Content})
		}
	}
	return out
}

// eventCalls copies the model's calls into the log's form; nil stays nil.
func eventCalls(cs []model.ToolCall) []events.ToolCall {
	if cs == nil {
		return nil
	}
	out := make([]events.ToolCall, len(cs))
	for i, c := range cs {
		out[i] = events.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// modelCalls turns recorded calls back into the model's, for the
// request the next turn is built from; nil stays nil.
func modelCalls(cs []events.ToolCall) []model.ToolCall {
	if cs == nil {
		return nil
	}
	out := make([]model.ToolCall, len(cs))
	for i, c := range cs {
		out[i] = model.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// eventUsage copies reported usage; nil (none reported) stays nil.
func eventUsage(u *model.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	return &events.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
}
