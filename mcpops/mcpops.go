// Package mcpops serves the operator's view of Weft as MCP tools, so that
// an assistant can help a person work the inbox: the inboxes (approvals,
// uncertain effects, open questions), the run list, a run's view and its
// timeline. It is read-only unless Config.Answers adds the answering
// tools (approve, reject, reconcile, resolve, cancel), which send the same
// commands as the console and the CLI (package client, with the retry rules
// of docs/protocol.md): the runtime checks each exactly as it checks a
// person's own — the approver's credential or signed proof, the pending
// revision, the expiry, the policy — and the NATS server's permissions
// decide who may send them at all (an answer sent with a reader's
// credentials is permission_denied, naming the role that may). A
// reconcile, resolve or cancel carries the CLI's identity inputs: a
// reason, and a signed command proof the runner verifies, or a name
// recorded unverified — the principal a bearer token authenticated when
// the transport did (caller). `weft mcp operator` serves it (docs/mcp.md,
// "Operate").
package mcpops

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// The tools' names.
const (
	// ToolInbox lists what waits for a person.
	ToolInbox = "weft_inbox"
	// ToolRuns lists runs.
	ToolRuns = "weft_runs"
	// ToolRun reads one run.
	ToolRun = "weft_run"
	// ToolTimeline reads one run's events.
	ToolTimeline = "weft_timeline"
	// ToolApprove approves a pending approval request (Config.Answers).
	ToolApprove = "weft_approve"
	// ToolReject rejects a pending approval request (Config.Answers).
	ToolReject = "weft_reject"
	// ToolReconcile reconciles an uncertain effect (Config.Answers).
	ToolReconcile = "weft_reconcile"
	// ToolResolve resolves an open question (Config.Answers).
	ToolResolve = "weft_resolve"
	// ToolCancel cancels a run (Config.Answers).
	ToolCancel = "weft_cancel"
)

// Config configures New.
type Config struct {
	// Answers adds the answering tools. Default: read-only.
	Answers bool
	// Retry bounds the retries of an answer (client.WithRetry; default
	// api.DefaultRetryWithin); NoRetry sends each once.
	Retry   time.Duration
	NoRetry bool
	// Version is the server version told to clients (default "1").
	Version string
}

// Server is the operator MCP server; MCP returns the SDK server to run on
// a transport.
type Server struct {
	client *client.Client
	mcp    *mcp.Server
}

// New returns the operator server over nc. It sends the commands and the
// queries through package client, as any application does.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if cfg.Version == "" {
		cfg.Version = "1"
	}
	retry := cfg.Retry
	if retry <= 0 {
		retry = api.DefaultRetryWithin
	}
	if cfg.NoRetry {
		retry = 0
	}
	c, err := client.New(nc, client.WithRetry(retry))
	if err != nil {
		return nil, fmt.Errorf("mcpops: %w", err)
	}
	s := &Server{client: c,
		mcp: mcp.NewServer(&mcp.Implementation{Name: "weft-operator", Version: cfg.Version}, nil)}
	read := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolInbox, Annotations: read,
		Description: "What waits for a person: kind approvals (approval requests, with the arguments and the revision to answer), uncertain (effects whose outcome nobody knows, to reconcile) or questions (effects reconciled as unconfirmed, to resolve); optionally of one run or agent; paged with cursor."}, s.inbox)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolRuns, Annotations: read,
		Description: "Runs, most recently changed first: filter by status (working, unattended, suspended, finished, quarantined), agent, updated_since (RFC 3339); paged with cursor."}, s.runs)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolRun, Annotations: read,
		Description: "One run's view: status, actions with their states, what it waits for, outcome."}, s.run)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolTimeline, Annotations: read,
		Description: "One run's recorded events in order (its audit trail), after version after, at most limit."}, s.timeline)
	if cfg.Answers {
		act := &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(bool)}
		mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolApprove, Annotations: act, InputSchema: inputSchema[AnswerIn](),
			Description: "Approve a pending approval request (run, action, revision from weft_inbox) as approver, with the approver's credential or a signed proof; checked by the runtime as a person's answer is. Optional arguments approve the call narrowed to these edited arguments instead of the model's: the runtime decodes them with the tool's input schema and re-runs the policy with them (refused as edit_refused unless it allows them or asks for the same requirement), a signed proof must state their hash (approved_sha256), and the tool runs with them. Give the same command_id to retry."}, s.approve)
		mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolReject, Annotations: act, InputSchema: inputSchema[AnswerIn](),
			Description: "Reject a pending approval request with a reason, as approver (credential or signed proof)."}, s.reject)
		mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolReconcile, Annotations: act, InputSchema: inputSchema[ContentIn](),
			Description: `Reconcile an uncertain effect with what a person found out: content is the tool's output itself (a JSON value of its output schema, not wrapped), {"error": "…"} or {"unconfirmed": "note"}; reason says why; by names the person (unverified), or proof is the person's signed command proof (weft reconcile --signing-key KEY --print-proof), recorded verified.`}, s.reconcile)
		mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolResolve, Annotations: act, InputSchema: inputSchema[ContentIn](),
			Description: `Resolve an open question (an effect reconciled as unconfirmed) with its final truth: content is the tool's output itself (a JSON value of its output schema, not wrapped) or {"error": "…"}; reason, by and proof as for weft_reconcile (weft resolve --signing-key KEY --print-proof).`}, s.resolve)
		mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolCancel, Annotations: act,
			Description: "Cancel a run, with a reason; by names the person (unverified), or proof is the person's signed command proof (weft cancel --signing-key KEY --print-proof), recorded verified."}, s.cancel)
	}
	return s, nil
}

// inputSchema is the input schema inferred from T, with any JSON value
// for its json.RawMessage fields (edited arguments, a reconciliation's
// content): inferred as is, a json.RawMessage is a byte slice, whose
// schema refuses every JSON object.
func inputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
	}})
	if err != nil {
		panic(fmt.Sprintf("mcpops: input schema of %T: %v", *new(T), err))
	}
	return s
}

// The tools declare no output schema (their Out is any): the answers are
// the query service's and the command API's JSON (docs/protocol.md), whose
// arguments and outputs are any JSON, which a schema inferred from the Go
// types would misstate.

// MCP returns the SDK server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// InboxIn is weft_inbox's input.
type InboxIn struct {
	Kind   string `json:"kind" jsonschema:"approvals, uncertain or questions"`
	Run    string `json:"run,omitempty" jsonschema:"only this run's items"`
	Agent  string `json:"agent,omitempty" jsonschema:"only this agent's items"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1..1000"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next of the previous page"`
}

// InboxOut is weft_inbox's answer: the items of the kind asked.
type InboxOut struct {
	Approvals []projections.ApprovalItem  `json:"approvals,omitempty"`
	Uncertain []projections.UncertainItem `json:"uncertain,omitempty"`
	Questions []projections.QuestionItem  `json:"questions,omitempty"`
	Next      string                      `json:"next,omitempty"`
}

func (s *Server) inbox(ctx context.Context, _ *mcp.CallToolRequest, in InboxIn) (*mcp.CallToolResult, any, error) {
	q := projector.InboxRequest{Run: in.Run, Agent: in.Agent, Limit: in.Limit, Cursor: in.Cursor}
	var out InboxOut
	switch in.Kind {
	case "approvals":
		r, err := s.client.ApprovalsPage(ctx, q)
		if err != nil {
			return nil, out, err
		}
		out.Approvals, out.Next = r.Items, r.Next
	case "uncertain":
		r, err := s.client.UncertainPage(ctx, q)
		if err != nil {
			return nil, out, err
		}
		out.Uncertain, out.Next = r.Items, r.Next
	case "questions":
		r, err := s.client.QuestionsPage(ctx, q)
		if err != nil {
			return nil, out, err
		}
		out.Questions, out.Next = r.Items, r.Next
	default:
		return nil, out, weft.Errorf(weft.CodeInvalidRequest, "kind %q: want approvals, uncertain or questions", in.Kind)
	}
	return nil, out, nil
}

func (s *Server) runs(ctx context.Context, _ *mcp.CallToolRequest, in projections.ListQuery) (*mcp.CallToolResult, any, error) {
	page, err := s.client.List(ctx, in)
	return nil, page, err
}

// RunIn names a run.
type RunIn struct {
	Run string `json:"run"`
}

func (s *Server) run(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, any, error) {
	r, err := s.client.RunFamily(ctx, in.Run)
	return nil, r, err
}

// TimelineIn asks for a run's events after version After.
type TimelineIn struct {
	Run   string `json:"run"`
	After uint64 `json:"after,omitempty" jsonschema:"the version after which to start (0: from the first event)"`
	Limit int    `json:"limit,omitempty" jsonschema:"at most this many events (default 500)"`
}

func (s *Server) timeline(ctx context.Context, _ *mcp.CallToolRequest, in TimelineIn) (*mcp.CallToolResult, any, error) {
	r, err := s.client.History(ctx, projector.HistoryRequest{Run: in.Run, After: in.After, Limit: in.Limit})
	return nil, r, err
}

// AnswerIn is an approval answer's input.
type AnswerIn struct {
	Run        string                `json:"run"`
	Action     string                `json:"action"`
	Revision   int                   `json:"revision" jsonschema:"the pending request's revision, from weft_inbox"`
	Approver   string                `json:"approver"`
	Credential string                `json:"credential,omitempty" jsonschema:"the approver's credential (approvers that take one)"`
	Proof      *events.ApprovalProof `json:"proof,omitempty" jsonschema:"a signed proof (approvers of signed proofs; docs/security.md)"`
	Reason     string                `json:"reason,omitempty" jsonschema:"why (reject)"`
	// Arguments are an approve's edited arguments (api.ApproveRequest.Arguments).
	Arguments json.RawMessage `json:"arguments,omitempty" jsonschema:"approve only: edited arguments that narrow the call (docs/semantics.md §4, Approving narrower arguments); the policy re-checks them"`
	CommandID string          `json:"command_id,omitempty" jsonschema:"the same id on a retry answers the same"`
}

func (s *Server) approve(ctx context.Context, req *mcp.CallToolRequest, in AnswerIn) (*mcp.CallToolResult, any, error) {
	r, err := s.client.Approve(ctx, api.ApproveRequest{CommandID: in.CommandID, Run: in.Run, Action: in.Action, Revision: in.Revision,
		Approver: in.Approver, Credential: in.Credential, Proof: in.Proof, Arguments: sentField(req, "arguments", in.Arguments)})
	return nil, r, err
}

// sentField is the input field name exactly as the tool call sent it:
// the MCP SDK hands the handler its input decoded and encoded again (keys
// sorted, numbers as float64), which is the same JSON value but not the
// same bytes — and a signed proof states the SHA-256 of the bytes sent
// (an approval's edited arguments, approved_sha256; a reconciliation's
// or resolution's content), which key order and number spelling change.
// decoded, the field as the handler got it, is the answer when the call's
// own is not readable or not there.
func sentField(req *mcp.CallToolRequest, name string, decoded json.RawMessage) json.RawMessage {
	var sent map[string]json.RawMessage
	if req == nil || req.Params == nil || json.Unmarshal(req.Params.Arguments, &sent) != nil || sent[name] == nil {
		return decoded
	}
	return sent[name]
}

func (s *Server) reject(ctx context.Context, _ *mcp.CallToolRequest, in AnswerIn) (*mcp.CallToolResult, any, error) {
	if api.EditedArguments(in.Arguments) != nil {
		// As a batch decide's reject item (api.DecideRequest): a reject
		// never narrows a call, so edited arguments are refused, never dropped.
		return nil, nil, weft.Errorf(weft.CodeInvalidRequest, "arguments: a reject takes no edited arguments")
	}
	r, err := s.client.Reject(ctx, api.RejectRequest{CommandID: in.CommandID, Run: in.Run, Action: in.Action, Revision: in.Revision,
		Reason: in.Reason, Approver: in.Approver, Credential: in.Credential, Proof: in.Proof})
	return nil, r, err
}

// ContentIn is a reconciliation's or a resolution's input.
type ContentIn struct {
	Run     string          `json:"run"`
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content" jsonschema:"the tool's output itself (a JSON value of its output schema, not wrapped), {\"error\": \"…\"} or (reconcile only) {\"unconfirmed\": \"note\"}"`
	// Identity: as the CLI's (weft reconcile --by, --reason,
	// --signing-key): by is recorded unverified; a proof is recorded as
	// its key's person, verified, when the runner verifies it.
	By        string               `json:"by,omitempty" jsonschema:"who found it out (recorded unverified; over HTTP with --tokens it is the token's principal: leave it out or give that name)"`
	Reason    string               `json:"reason,omitempty" jsonschema:"why it is recorded (required when the deployment requires identities)"`
	Proof     *events.CommandProof `json:"proof,omitempty" jsonschema:"a signed command proof by a person key (what weft reconcile or weft resolve --signing-key KEY --print-proof prints, for the same run, action, content and reason): recorded verified"`
	CommandID string               `json:"command_id,omitempty"`
}

func (s *Server) reconcile(ctx context.Context, req *mcp.CallToolRequest, in ContentIn) (*mcp.CallToolResult, any, error) {
	by, err := caller(req, in.By)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.client.Reconcile(ctx, api.ReconcileRequest{CommandID: in.CommandID, Run: in.Run, Action: in.Action, Content: sentField(req, "content", in.Content),
		By: by, Reason: in.Reason, Proof: in.Proof})
	return nil, r, err
}

func (s *Server) resolve(ctx context.Context, req *mcp.CallToolRequest, in ContentIn) (*mcp.CallToolResult, any, error) {
	by, err := caller(req, in.By)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.client.Resolve(ctx, api.ResolveRequest{CommandID: in.CommandID, Run: in.Run, Action: in.Action, Content: sentField(req, "content", in.Content),
		By: by, Reason: in.Reason, Proof: in.Proof})
	return nil, r, err
}

// CancelIn is a cancellation's input.
type CancelIn struct {
	Run       string               `json:"run"`
	Reason    string               `json:"reason,omitempty" jsonschema:"why (required when the deployment requires identities)"`
	By        string               `json:"by,omitempty" jsonschema:"who cancels (recorded unverified; over HTTP with --tokens it is the token's principal: leave it out or give that name)"`
	Proof     *events.CommandProof `json:"proof,omitempty" jsonschema:"a signed command proof by a person key (what weft cancel --signing-key KEY --print-proof prints, for the same run and reason): recorded verified"`
	CommandID string               `json:"command_id,omitempty"`
}

func (s *Server) cancel(ctx context.Context, req *mcp.CallToolRequest, in CancelIn) (*mcp.CallToolResult, any, error) {
	by, err := caller(req, in.By)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.client.Cancel(ctx, api.CancelRequest{CommandID: in.CommandID, Run: in.Run, Reason: in.Reason, By: by, Proof: in.Proof})
	return nil, r, err
}

// caller is the by a reconcile, resolve or cancel is sent with. When the
// transport authenticated the caller (a bearer token of --tokens:
// req.Extra.TokenInfo.UserID) it is that principal, never a name the call
// typed: a typed by that differs is refused (invalid_request), so that
// the log never names someone the token does not stand for, and the
// caller learns it rather than finding another name recorded. Without an
// authenticated caller (stdio, HTTP without --tokens) it is the typed
// name. Either way it is recorded unverified (docs/security.md, "Who did
// it"): only a proof the runner verifies makes the command verified, and
// a deployment that requires identities and has person keys refuses a
// command without one (identity_required; without person keys a name is
// enough) — the runner decides, never this server.
func caller(req *mcp.CallToolRequest, typed string) (string, error) {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil || req.Extra.TokenInfo.UserID == "" {
		return typed, nil
	}
	principal := req.Extra.TokenInfo.UserID
	if typed != "" && typed != principal {
		return "", weft.Errorf(weft.CodeInvalidRequest, "by %q: this caller is authenticated as %q, whom by may only name (or leave it out)", typed, principal)
	}
	return principal, nil
}
