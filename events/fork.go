package events

import "encoding/json"

// NameRunForked is the stored name of RunForked, where a restarted run
// came from.
const NameRunForked Name = "run_forked"

// RunForked is emitted right after RunStarted, in the same first message,
// on a run restarted from a finished run's turn (docs/semantics.md §14,
// docs/adr/0029-restart-from-a-step.md). It records where the run came
// from and copies the conversation it continues, so that the run's fold
// needs only its own log: From names the parent run, the turn the new run
// asks again and the parent's version it was judged on; Transcript is the
// parent's conversation after its input (RunStarted's Input, copied), up
// to that turn: assistant turns, tool results and corrections as the
// model read them. The effects behind those results are not run again.
// The new run's first ModelRequested is From.Turn. By is who restarted
// it, Reason why, Identity and Proof whether the deployment vouches for By
// (a command proof of the restart: package proof's RestartSubject), as for
// CancelRequested; all empty in forks recorded before a restart recorded
// who made it.
type RunForked struct {
	From       ForkedFrom `json:"forked_from"`
	Transcript []Message  `json:"transcript"`
	By         string     `json:"by,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	// Identity says whether the deployment vouches for By (a signed
	// command proof by one of its keys).
	Identity
	// Proof is the signed command proof the restart was made with.
	Proof *CommandProof `json:"proof,omitempty"`
}

// ForkedFrom names the run a restarted run came from: the parent Run, its
// Version (head) the restart read, the Turn the new run asks again, and
// Hash, the parent's chain hash at Version (Envelope.Hash of its event
// Version: the prev its next event carries, the head its log reports at
// Version), so that an auditor who verified the parent's history links the
// child to it (audit.WithParent). Hash is empty in forks recorded before
// it was (their link to the parent is unchecked).
type ForkedFrom struct {
	Run     string `json:"run"`
	Version uint64 `json:"version"`
	Turn    int64  `json:"turn"`
	Hash    string `json:"hash,omitempty"`
}

// Role is the author of a transcript message, as Message records it.
type Role string

// The roles of a Message. They are the model port's values (mapped by name
// in runner/modelport.go, which TestModelPortConversions pins).
const (
	// RoleUser marks the run's input, or a corrective prompt.
	RoleUser Role = "user"
	// RoleAssistant marks a model turn: text, calls and provider data.
	RoleAssistant Role = "assistant"
	// RoleTool marks a turn's tool results, in call order.
	RoleTool Role = "tool"
)

// Message is one message of a copied transcript, the log's own record of
// the model port's message (docs/adr/0018): a user text, an assistant turn
// (text, calls, provider data byte for byte) or a turn's tool results in
// call order.
type Message struct {
	Role         Role            `json:"role"`
	Text         string          `json:"text,omitempty"`
	Calls        []ToolCall      `json:"calls,omitempty"`
	ProviderData json.RawMessage `json:"provider_data,omitempty"`
	Results      []ToolResult    `json:"results,omitempty"`
}

// ToolResult is what the model read for one tool call.
type ToolResult struct {
	CallID  string          `json:"call_id"`
	Name    string          `json:"name"`
	Content json.RawMessage `json:"content"`
}

// EventName returns NameRunForked, the durable name RunForked is stored under.
func (RunForked) EventName() Name { return NameRunForked }

// SchemaVersion returns 1, the version of RunForked's encoding (docs/protocol.md).
func (RunForked) SchemaVersion() int { return 1 }

func (RunForked) isEvent() {}
