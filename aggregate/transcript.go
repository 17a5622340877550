package aggregate

import (
	"encoding/json"
	"strconv"

	"github.com/weftrun/weft/events"
)

// Transcript rebuilds the run's conversation from its State, oldest first:
// the input, every assistant turn (text, calls, provider data byte for
// byte), the results of each tool batch in call order (only actions that
// ended model-visible) and every corrective prompt. Nothing of it is
// recorded twice; the runner never re-records a request.
func Transcript(s State) []events.Message {
	return s.render(s.transcript, modelContent)
}

// render is the conversation of entries (s's transcript or a part of it),
// each model-visible action's result read with content.
func (s State) render(entries []entry, content func(Action) json.RawMessage) []events.Message {
	out := make([]events.Message, 0, len(entries))
	for _, e := range entries {
		if e.batch == 0 {
			out = append(out, e.msg)
			continue
		}
		var res []events.ToolResult
		for _, a := range s.actions {
			if a.Turn == e.batch && a.ModelVisible() {
				res = append(res, events.ToolResult{CallID: a.CallID, Name: a.Tool, Content: content(a)})
			}
		}
		if len(res) > 0 {
			out = append(out, events.Message{Role: events.RoleTool, Results: res})
		}
	}
	return out
}

// modelContent is what the model reads of action a that ended
// model-visible: its content, wrapped with a note and the arguments it ran
// with when an approver narrowed it and it started with them (an attempt
// or a child run); a narrowed call that never started (rejected, expired
// or denied when asked again, cancelled while queued, or whose every
// attempt a late mark ended not_started) reads its plain content
// (docs/semantics.md §4, "Approving narrower arguments").
func modelContent(a Action) json.RawMessage {
	if a.Edited != nil && a.Started() && a.State != ActionNotStarted {
		return editedNote(a.Edited, a.Content)
	}
	return a.Content
}

// CorrectionText is the corrective user message of a typed answer that
// could not be read (docs/semantics.md §6); the runner sends the answer schema
// with the request.
func CorrectionText(reason string) string {
	return "your final answer could not be read: " + reason
}

// errorContent is the content the model reads for an action that ended
// with an error: {"error": code} or {"error": code, "detail": detail}.
func errorContent(code, detail string) json.RawMessage {
	b := []byte(`{"error":` + strconv.Quote(code))
	if detail != "" {
		d, _ := json.Marshal(detail)
		b = append(b, `,"detail":`...)
		b = append(b, d...)
	}
	return append(b, '}')
}
