package aggregate

import (
	"slices"

	"github.com/weftrun/weft/events"
)

// The core speaks only the log's types (package events, docs/adr/0018):
// a model reply enters as Reply, a failure with an events.FailureKind,
// and the transcript is a list of events.Message. The runner converts
// the model port's types to these where it calls the model, and back
// where it builds the model's request (docs/adr/0037).

// Reply is a model turn's reply as the core reads it: the model port's
// reply in the log's types. Turn is the assistant turn (text, calls and
// provider data byte for byte); Reason is a refusal's reason or a
// truncated reply's partial text; Usage is nil when the provider reported
// none. A Kind outside events' reply kinds is recorded as reported, and
// Decide refuses it (model_protocol_violation).
type Reply struct {
	Kind   events.ReplyKind
	Turn   events.Message
	Reason string
	Usage  *events.Usage
}

// replyEvent records the reply of turn as the log stores it.
func replyEvent(turn int64, r Reply) events.ModelReplied {
	return events.ModelReplied{Turn: turn, Kind: r.Kind, Text: r.Turn.Text, Calls: cloneCalls(r.Turn.Calls),
		ProviderData: r.Turn.ProviderData, Reason: r.Reason, Usage: cloneUsage(r.Usage)}
}

// cloneCalls copies calls; nil stays nil.
func cloneCalls(cs []events.ToolCall) []events.ToolCall {
	return slices.Clone(cs)
}

// cloneUsage copies reported usage; nil (none reported) stays nil.
func cloneUsage(u *events.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

// cloneMessage copies m's calls and results slices (the JSON bytes of
// arguments, contents and provider data are shared and never written);
// empty results become nil.
func cloneMessage(m events.Message) events.Message {
	out := events.Message{Role: m.Role, Text: m.Text, Calls: cloneCalls(m.Calls), ProviderData: m.ProviderData}
	for _, r := range m.Results {
		out.Results = append(out.Results, events.ToolResult{CallID: r.CallID, Name: r.Name, Content: r.Content})
	}
	return out
}
