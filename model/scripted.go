package model

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Scripted is a Model that answers offline, for tests and the demo: from a
// script of steps indexed by turn (NewScripted), or from rules over the
// request (NewRules). It is deterministic in the Request it is given: the
// same request gets the same reply, so a run recovered on another runner
// sees the same model. It records every request it was given (Requests).
type Scripted struct {
	name    string
	respond func(ctx context.Context, req Request) (Reply, error)

	mu       sync.Mutex
	requests []Request
}

// Step is one scripted turn: it returns the reply (or the *Error) for a
// request. The helpers Answer, CallTools, Refuse, Truncate, Fail and Hang
// make the common ones.
type Step func(ctx context.Context, req Request) (Reply, error)

// NewScripted returns a Scripted model called name whose reply to turn n is
// steps[n-1]. A turn past the script fails with ErrInvalidRequest, which the
// runtime does not retry.
func NewScripted(name string, steps ...Step) *Scripted {
	steps = append([]Step(nil), steps...)
	return &Scripted{name: name, respond: func(ctx context.Context, req Request) (Reply, error) {
		if req.Turn < 1 || req.Turn > len(steps) {
			return Reply{}, &Error{Kind: ErrInvalidRequest, Message: fmt.Sprintf("scripted model %s has no step for turn %d", name, req.Turn)}
		}
		return steps[req.Turn-1](ctx, req)
	}}
}

// Rule is one rule of a NewRules model: when Match reports true for a
// request, Step answers it.
type Rule struct {
	// Name says what the rule does, for error messages.
	Name string
	// Match reports whether the rule answers req.
	Match func(req Request) bool
	// Step answers req.
	Step Step
}

// NewRules returns a Scripted model called name that answers each request
// with the first rule that matches it. A request no rule matches gets the
// final answer "I cannot help with that.".
func NewRules(name string, rules ...Rule) *Scripted {
	rules = append([]Rule(nil), rules...)
	return &Scripted{name: name, respond: func(ctx context.Context, req Request) (Reply, error) {
		for _, r := range rules {
			if r.Match != nil && r.Match(req) {
				return r.Step(ctx, req)
			}
		}
		return Answer("I cannot help with that.")(ctx, req)
	}}
}

// Name returns "scripted:" followed by the model's name.
func (s *Scripted) Name() string { return "scripted:" + s.name }

// Complete records req and answers it. A step that panics gives an
// ErrCrashed error.
func (s *Scripted) Complete(ctx context.Context, req Request) (r Reply, err error) {
	s.mu.Lock()
	s.requests = append(s.requests, cloneRequest(req))
	s.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			r, err = Reply{}, &Error{Kind: ErrCrashed, Message: fmt.Sprintf("scripted step panicked: %v", p)}
		}
	}()
	if err := ctx.Err(); err != nil {
		return Reply{}, &Error{Kind: ErrTimedOut, Message: err.Error()}
	}
	return s.respond(ctx, req)
}

// Requests returns copies of the requests the model was given, oldest
// first.
func (s *Scripted) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = cloneRequest(r)
	}
	return out
}

func cloneRequest(r Request) Request {
	b, err := json.Marshal(r)
	if err != nil {
		return r
	}
	var c Request
	if err := json.Unmarshal(b, &c); err != nil {
		return r
	}
	return c
}

// usage is what every scripted reply reports unless WithUsage says
// otherwise: a small, fixed count, so that token budgets can be tested.
var usage = Usage{InputTokens: 10, OutputTokens: 5}

// Answer returns a Step that gives text as the final answer (the JSON of a
// typed answer, or free text).
func Answer(text string) Step {
	return func(context.Context, Request) (Reply, error) {
		u := usage
		return Reply{Kind: ReplyFinalAnswer, Turn: Message{Role: RoleAssistant, Text: text}, Usage: &u}, nil
	}
}

// Call returns a ToolCall of tool with arguments args (JSON). Its ID is
// filled in by CallTools when empty.
func Call(tool, args string) ToolCall {
	return ToolCall{Name: tool, Arguments: json.RawMessage(args)}
}

// CallTools returns a Step that asks for calls, in order. Calls without an
// ID get "call_<turn>_<n>", n counting from 1, so ids are the same every
// time the turn is replayed.
func CallTools(calls ...ToolCall) Step {
	calls = append([]ToolCall(nil), calls...)
	return func(_ context.Context, req Request) (Reply, error) {
		out := make([]ToolCall, len(calls))
		for i, c := range calls {
			if c.ID == "" {
				c.ID = fmt.Sprintf("call_%d_%d", req.Turn, i+1)
			}
			out[i] = c
		}
		u := usage
		return Reply{Kind: ReplyToolRequest, Turn: Message{Role: RoleAssistant, Calls: out}, Usage: &u}, nil
	}
}

// Refuse returns a Step that refuses with reason.
func Refuse(reason string) Step {
	return func(context.Context, Request) (Reply, error) {
		u := usage
		return Reply{Kind: ReplyRefusal, Turn: Message{Role: RoleAssistant}, Reason: reason, Usage: &u}, nil
	}
}

// Truncate returns a Step whose reply hit the output limit after partial.
func Truncate(partial string) Step {
	return func(context.Context, Request) (Reply, error) {
		u := usage
		return Reply{Kind: ReplyTruncated, Turn: Message{Role: RoleAssistant, Text: partial}, Reason: partial, Usage: &u}, nil
	}
}

// Fail returns a Step that fails with kind.
func Fail(kind ErrorKind, message string) Step {
	return func(context.Context, Request) (Reply, error) {
		return Reply{}, &Error{Kind: kind, Message: message}
	}
}

// Hang returns a Step that blocks until its context ends and then fails
// timed_out, as a provider that never answers does under the model timeout.
func Hang() Step {
	return func(ctx context.Context, _ Request) (Reply, error) {
		<-ctx.Done()
		return Reply{}, &Error{Kind: ErrTimedOut, Message: "scripted model hung: " + ctx.Err().Error()}
	}
}

// WithUsage returns the step with its reply's usage replaced: nil reports
// no usage (as some providers do), otherwise *u.
func (s Step) WithUsage(u *Usage) Step {
	return func(ctx context.Context, req Request) (Reply, error) {
		r, err := s(ctx, req)
		if err != nil {
			return r, err
		}
		if u == nil {
			r.Usage = nil
		} else {
			c := *u
			r.Usage = &c
		}
		return r, nil
	}
}

// Input returns the run's input: the text of the transcript's first user
// message.
func Input(req Request) string {
	for _, m := range req.Transcript {
		if m.Role == RoleUser {
			return m.Text
		}
	}
	return ""
}

// Results returns the tool results of the transcript's last message when it
// is a tool message, in call order; nil otherwise.
func Results(req Request) []ToolResult {
	if n := len(req.Transcript); n > 0 && req.Transcript[n-1].Role == RoleTool {
		return req.Transcript[n-1].Results
	}
	return nil
}

// ResultOf returns the content of the last result for tool anywhere in the
// transcript, and false when tool has no result yet.
func ResultOf(req Request, tool string) (json.RawMessage, bool) {
	for i := len(req.Transcript) - 1; i >= 0; i-- {
		rs := req.Transcript[i].Results
		for j := len(rs) - 1; j >= 0; j-- {
			if rs[j].Name == tool {
				return rs[j].Content, true
			}
		}
	}
	return nil, false
}

// InputContains returns a Match that reports whether the run's input
// contains every one of words, ignoring case.
func InputContains(words ...string) func(Request) bool {
	return func(req Request) bool {
		in := strings.ToLower(Input(req))
		for _, w := range words {
			if !strings.Contains(in, strings.ToLower(w)) {
				return false
			}
		}
		return true
	}
}
