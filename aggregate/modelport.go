package aggregate

import (
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// This file is the one place where the model port's Go types (package
// model) meet the log's (package events, docs/adr/0018): a reply or a
// failure becomes an event here, and a recorded turn becomes the model's
// messages again here. Every known kind is mapped by name, so a renamed
// or revalued constant on either side fails TestModelPortConversions
// instead of silently changing what the log holds.

// replyEvent records the reply of turn as the log stores it.
func replyEvent(turn int64, r model.Reply) events.ModelReplied {
	return events.ModelReplied{Turn: turn, Kind: replyKind(r.Kind), Text: r.Turn.Text, Calls: eventCalls(r.Turn.Calls),
		ProviderData: r.Turn.ProviderData, Reason: r.Reason, Usage: eventUsage(r.Usage)}
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
// transcript the next turn is built from; nil stays nil.
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
