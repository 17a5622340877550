// Package mcpserve serves Weft agents as Model Context Protocol (MCP) tools:
// an assistant that speaks MCP calls an agent as one tool, and the agent
// runs as a durable Weft run (started over the command API, followed over
// the query API, both on NATS). `weft mcp serve` wires it to stdio or
// streamable HTTP; docs/mcp.md is the reference.
//
// # Keyed invocation
//
// Each agent tool takes {"input": text, "key": optional text}; the key may
// come in the request's _meta under mcptools.MetaIdempotencyKey instead
// (a Weft agent calling another through package mcptools sends its action's
// key there). With a key, the run id is RunID(service, principal, key): a
// client retrying with the same key — after a lost answer, a killed server,
// a new session — reopens the same run instead of starting another, and the
// same key with another input (or for another agent) answers key_reused.
// Without a key every call is a fresh run.
//
// # Answers
//
// A call waits up to the configured wait for the run to settle, then
// answers plainly, as text for the model and as structured content (Answer)
// for programs, with the run id also in the result's _meta under MetaRun:
// completed with the final answer; waiting for approval, with what to
// approve and how; uncertain, with each action's evidence and how to
// reconcile; ended otherwise (refused, budget exhausted, failed, cancelled:
// isError); or still working, with the run id to ask again — the same call
// with the same key, or the status tool. Never a guess, and never stale:
// the status comes from the read model's view of the run, which follows the
// log eventually, so a view is taken as settled only once it has caught up
// with the run's log (its version is the run's last in the log, read after
// the view; the same for each child run it lists). A person who approved
// and answered before the call is never contradicted by an answer that
// still lists the approval; a view that does not catch up within the wait
// answers working ("ask again"). A start answered with a retryable code
// is sent again with the same command id (Config.Retry; docs/protocol.md,
// "Retry rules"), and a start whose outcome is not known is read from its
// run. When no view could be read in time, the call answers "not known"
// as the JSON-RPC error CodeOutcomeUnknown — never an isError result, which
// a client (mcptools among them) reads as a definite failure.
package mcpserve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

// The _meta keys of a tool result.
const (
	// MetaRun carries the run id the answer is about.
	MetaRun = "run.weft/run"
	// MetaStatus carries the answer's Status.
	MetaStatus = "run.weft/status"
)

// The statuses of an Answer.
const (
	// StatusCompleted means the run finished completed; Answer is its answer.
	StatusCompleted = "completed"
	// StatusWaitingForApproval means the run waits for people to answer the
	// approval requests in Approvals.
	StatusWaitingForApproval = "waiting_for_approval"
	// StatusUncertain means the effect of the actions in Uncertain may or
	// may not have happened; the run waits until a person reconciles them.
	// Approvals may be pending too.
	StatusUncertain = "uncertain"
	// StatusWorking means the run was still working when the wait ran out;
	// ask again with the same key, or with the status tool and Run.
	StatusWorking = "working"
	// StatusEnded means the run finished with another outcome than
	// completed (Outcome says which).
	StatusEnded = "ended"
	// StatusRefused means the call was refused (Error says why): no run
	// was started or reopened.
	StatusRefused = "refused"
	// StatusUnknown means what the call did is not known: whether it
	// started a run, or how its run stands, could not be read in time
	// (Error says what did not answer). Run names the run when it is this
	// call's. An agent tool answers it as the JSON-RPC error
	// CodeOutcomeUnknown, never as an isError result, which clients read
	// as a definite failure.
	StatusUnknown = "unknown"
)

// CodeOutcomeUnknown is the JSON-RPC error code of an agent tool's answer
// StatusUnknown; the error's data is the Answer, its message the text.
const CodeOutcomeUnknown int64 = -32050

// DefaultStatusTool is the name of the status tool unless
// Config.StatusTool says otherwise.
const DefaultStatusTool = "weft_run_status"

// Agent is one agent served as an MCP tool.
type Agent struct {
	// Name is the agent name the runners serve; Version its version
	// (empty: the version the runners serve).
	Name, Version string
	// Tool is the MCP tool name (default Name).
	Tool string
	// Description is what the client and its model read about the tool
	// (default: a sentence naming the agent).
	Description string
}

// Config configures New.
type Config struct {
	// Service names this MCP service in the run ids it derives (default
	// "weft"): two services with different names never share a run.
	Service string
	// Agents are the agents served, one tool each.
	Agents []Agent
	// Principal says who calls: the second part of the run id of a keyed
	// call. Default: the bearer token's user (req.Extra.TokenInfo.UserID)
	// when the transport authenticated one, else DefaultPrincipal.
	Principal func(ctx context.Context, req *mcp.CallToolRequest) (string, error)
	// DefaultPrincipal is the principal of calls without an authenticated
	// user (default "local").
	DefaultPrincipal string
	// Wait bounds how long a call waits for its run to settle before it
	// answers still working (default 20 s).
	Wait time.Duration
	// StatusTool is the name of the tool that answers for a run id
	// (default DefaultStatusTool); "-" serves none.
	StatusTool string
	// Version is the server version told to clients (default "1").
	Version string
	// Retry bounds how long a start answered with a retryable code
	// (weft.Code.Retryable: runner_busy, contended, conflict, unavailable)
	// is sent again, with the same command id (default
	// api.DefaultRetryWithin, and never more than half of Wait: the rest
	// reads the run; docs/protocol.md, "Retry rules"). NoRetry sends each
	// start once.
	Retry   time.Duration
	NoRetry bool
	// ApproveCommand writes the command that answers a pending approval,
	// told to the caller in Approval.Command. Default: the trusting
	// approver's form of the demo, `weft approve RUN ACTION --revision N
	// --approver NAME --credential CREDENTIAL`; a deployment whose
	// approvers take signed proofs names the signing form
	// (SigningApproveCommand), which is the one that works there.
	ApproveCommand func(run, action string, revision int) string
}

// SigningApproveCommand is an ApproveCommand for approvers of signed
// proofs (docs/security.md): `weft approve RUN ACTION --revision N
// --approver APPROVER --signing-key KEYFILE`, with approver named when it
// is not empty.
func SigningApproveCommand(approver string) func(run, action string, revision int) string {
	if approver == "" {
		approver = "APPROVER"
	}
	return func(run, action string, revision int) string {
		return fmt.Sprintf("weft approve %s %s --revision %d --approver %s --signing-key KEYFILE", run, action, revision, approver)
	}
}

// credentialApproveCommand is the default ApproveCommand.
func credentialApproveCommand(run, action string, revision int) string {
	return fmt.Sprintf("weft approve %s %s --revision %d --approver NAME --credential CREDENTIAL", run, action, revision)
}

// Server serves agents as MCP tools. Create it with New; MCP returns the
// SDK server to run on a transport.
type Server struct {
	cfg    Config
	client *client.Client // the commands, the queries and the runs' heads (caughtUp)
	mcp    *mcp.Server
	served map[string]bool
}

// New returns a Server that starts and follows runs over nc. It refuses
// (invalid_name, invalid_request) a config without agents, a tool name
// outside the shared grammar (tools.ValidName) and duplicate tool names.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if cfg.Service == "" {
		cfg.Service = "weft"
	}
	if cfg.DefaultPrincipal == "" {
		cfg.DefaultPrincipal = "local"
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 20 * time.Second
	}
	if cfg.StatusTool == "" {
		cfg.StatusTool = DefaultStatusTool
	}
	if cfg.Version == "" {
		cfg.Version = "1"
	}
	if cfg.Retry <= 0 {
		cfg.Retry = api.DefaultRetryWithin
	}
	if cfg.ApproveCommand == nil {
		cfg.ApproveCommand = credentialApproveCommand
	}
	retry := cfg.Retry
	if cfg.NoRetry {
		retry = 0
	}
	if len(cfg.Agents) == 0 {
		return nil, &weft.Error{Code: weft.CodeInvalidRequest, Message: "mcpserve: no agents to serve"}
	}
	w, err := client.New(nc, client.WithRetry(retry))
	if err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	s := &Server{cfg: cfg, client: w, served: map[string]bool{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "weft-" + cfg.Service, Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Each tool runs a Weft agent as a durable run. Pass a key to make a call safe to retry: the same key reopens the same run.",
	})
	seen := map[string]bool{}
	for _, a := range cfg.Agents {
		if a.Tool == "" {
			a.Tool = a.Name
		}
		if !tools.ValidName(a.Tool) {
			return nil, &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("mcpserve: tool name %q: must be 1-64 ASCII letters, digits, '_' or '-'", a.Tool)}
		}
		if seen[a.Tool] || a.Tool == cfg.StatusTool {
			return nil, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("mcpserve: two tools are called %q", a.Tool)}
		}
		seen[a.Tool] = true
		s.served[a.Name] = true
		if a.Description == "" {
			a.Description = fmt.Sprintf("Runs the Weft agent %s on the given input, as a durable run: it may act on the world, and may wait for a person's approval. Pass a key to retry safely.", a.Name)
		}
		s.mcp.AddTool(&mcp.Tool{Name: a.Tool, Description: a.Description, InputSchema: json.RawMessage(agentInputSchema), OutputSchema: json.RawMessage(answerSchema)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.invoke(ctx, a, req)
			})
	}
	if cfg.StatusTool != "-" {
		if !tools.ValidName(cfg.StatusTool) {
			return nil, &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("mcpserve: status tool name %q: must be 1-64 ASCII letters, digits, '_' or '-'", cfg.StatusTool)}
		}
		s.mcp.AddTool(&mcp.Tool{Name: cfg.StatusTool, Description: "Answers what happened to a run a tool of this server started, by its run id (waiting for it to settle first).",
			InputSchema: json.RawMessage(statusInputSchema), OutputSchema: json.RawMessage(answerSchema)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.status(ctx, req), nil
			})
	}
	return s, nil
}

// MCP returns the SDK server: run it with Run on a stdio transport, or
// serve it with mcp.NewStreamableHTTPHandler.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// runIDDomain separates these run ids from other hashes of the same parts
// and versions the derivation.
const runIDDomain = "weft.mcp.run.v1"

// RunID returns the run id of a keyed call: "mcp-" followed by the
// lowercase hex SHA-256 of the JSON array ["weft.mcp.run.v1", service,
// principal, key]. The parts are framed, so ("a-b", "c") and ("a", "b-c")
// never share a run.
func RunID(service, principal, key string) string {
	b, err := json.Marshal([4]string{runIDDomain, service, principal, key})
	if err != nil {
		panic(fmt.Sprintf("mcpserve: run id: %v", err)) // strings always marshal
	}
	sum := sha256.Sum256(b)
	return "mcp-" + hex.EncodeToString(sum[:])
}

const agentInputSchema = `{"type":"object","properties":{` +
	`"input":{"type":"string","description":"What to ask the agent."},` +
	`"key":{"type":"string","minLength":1,"maxLength":256,"description":"Idempotency key: a call repeated with the same key and input reopens the same run instead of starting another (use one key per task; retry with it after a timeout or a lost answer). Omit it for a fresh run on every call."}},` +
	`"required":["input"],"additionalProperties":false}`

const statusInputSchema = `{"type":"object","properties":{` +
	`"run":{"type":"string","minLength":1,"maxLength":128,"description":"The run id a previous answer gave."}},` +
	`"required":["run"],"additionalProperties":false}`

const answerSchema = `{"type":"object","properties":{` +
	`"status":{"type":"string","enum":["completed","waiting_for_approval","uncertain","working","ended","refused","unknown"]},` +
	`"run":{"type":"string"},"agent":{"type":"string"},"answer":{},"outcome":{"type":"object"},` +
	`"approvals":{"type":"array","items":{"type":"object"}},"uncertain":{"type":"array","items":{"type":"object"}},` +
	`"error":{"type":"object","properties":{"code":{"type":"string"},"reason":{"type":"string"},"message":{"type":"string"}},"required":["code"]}},` +
	`"required":["status"]}`

// Answer is the structured content of every tool result.
type Answer struct {
	// Status is one of the Status* constants.
	Status string `json:"status"`
	// Run is the run id (absent when a refusal came before any run).
	Run string `json:"run,omitempty"`
	// Agent is the agent the run belongs to.
	Agent string `json:"agent,omitempty"`
	// Answer is a completed run's answer: a JSON string for a free-text
	// agent, the typed value otherwise.
	Answer json.RawMessage `json:"answer,omitempty"`
	// Outcome is the outcome of a run that ended (StatusEnded, and
	// StatusCompleted).
	Outcome *events.Outcome `json:"outcome,omitempty"`
	// Approvals are the pending approval requests, in the run's action
	// order, then its child runs'.
	Approvals []Approval `json:"approvals,omitempty"`
	// Uncertain are the actions whose effect is uncertain.
	Uncertain []Uncertain `json:"uncertain,omitempty"`
	// Error is why a call was refused.
	Error *weft.Error `json:"error,omitempty"`
}

// Approval is one pending approval request: what a person approves.
type Approval struct {
	// Run and Action are the reference a person answers.
	Run    string `json:"run"`
	Action string `json:"action"`
	// Tool and Arguments are what the action does.
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Requirement is the approval requirement; Revision the request's
	// revision; Expires its deadline, if any.
	Requirement events.Requirement `json:"requirement"`
	Revision    int                `json:"revision"`
	Expires     *time.Time         `json:"expires,omitempty"`
	// Command is the weft command that approves it.
	Command string `json:"command"`
}

// Uncertain is one action whose effect may or may not have happened.
type Uncertain struct {
	// Run and Action are the reference a person reconciles.
	Run    string `json:"run"`
	Action string `json:"action"`
	// Tool and Arguments are what the action did, or may have done.
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Evidence is what is known.
	Evidence string `json:"evidence"`
	// Command is the weft command that reconciles it (choose one form).
	Command string `json:"command"`
}

func (s *Server) principal(ctx context.Context, req *mcp.CallToolRequest) (string, error) {
	if s.cfg.Principal != nil {
		p, err := s.cfg.Principal(ctx, req)
		if err == nil && p == "" {
			err = errors.New("no principal")
		}
		return p, err
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil && req.Extra.TokenInfo.UserID != "" {
		return req.Extra.TokenInfo.UserID, nil
	}
	return s.cfg.DefaultPrincipal, nil
}

// invoke answers one call of an agent tool: a result, or the JSON-RPC
// error CodeOutcomeUnknown when what the call did is not known.
func (s *Server) invoke(ctx context.Context, a Agent, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Input *string `json:"input"`
		Key   *string `json:"key"`
	}
	dec := json.NewDecoder(strings.NewReader(string(req.Params.Arguments)))
	dec.DisallowUnknownFields()
	if len(req.Params.Arguments) > 0 {
		if err := dec.Decode(&in); err != nil {
			return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "the arguments must be {\"input\": text, \"key\": optional text}: %v", err)), nil
		}
	}
	if in.Input == nil {
		return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "input is missing")), nil
	}
	key, keyed := "", in.Key != nil
	if keyed {
		key = *in.Key
	}
	if mk, ok := req.Params.Meta[mcptools.MetaIdempotencyKey]; ok {
		ms, isString := mk.(string)
		switch {
		case !isString || ms == "":
			return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "_meta %s must be a non-empty string", mcptools.MetaIdempotencyKey)), nil
		case keyed && key != ms:
			return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "the key argument and _meta %s differ", mcptools.MetaIdempotencyKey)), nil
		}
		key, keyed = ms, true
	}
	switch {
	case keyed && key == "":
		// An empty key is no key: every retry with it would be a fresh run.
		return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "the key is empty: a key is 1-256 bytes (omit it for a fresh run on every call)")), nil
	case len(key) > 256:
		return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "the key is longer than 256 bytes")), nil
	}
	run := freshRunID()
	if keyed {
		p, err := s.principal(ctx, req)
		if err != nil {
			return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "who calls is not known: %v", err)), nil
		}
		run = RunID(s.cfg.Service, p, key)
	}
	deadline := time.Now().Add(s.cfg.Wait)
	// The start's retries (the retry rules) take at most half the call's
	// wait: the rest reads the run, whatever the start answered.
	sctx, cancel := context.WithTimeout(ctx, s.cfg.Wait/2)
	started, err := s.client.Start(sctx, api.StartRequest{Run: run, Agent: a.Name, Version: a.Version, Input: *in.Input})
	cancel()
	switch {
	case err == nil:
		run = started.Run
	case errors.Is(err, &weft.Error{Code: weft.CodeAlreadyStarted}) && keyed:
		// A retry, or another input under the same key. The log's answer
		// (same_input: same agent version and input) settles a retry; a
		// run of another version of the agent (deployed between the call
		// and its retry) is reopened all the same, so a "no" is checked
		// on the run's view.
		if same := asWeft(err).SameInput; same == nil || !*same {
			v, verr := s.view(ctx, run, deadline)
			if verr != nil {
				// Whether the key's run is this input's is not known: it
				// may be another input's, so it is not named.
				return s.answer(Answer{Status: StatusUnknown, Agent: a.Name, Error: asWeft(verr)}, keyed)
			}
			if v.Agent.Name != a.Name || v.Input != *in.Input {
				return s.refuse(keyReused()), nil
			}
		}
	default:
		if c := asWeft(err).Code; c == weft.CodeUnavailable || c == weft.CodeInternal || c == weft.CodeOutcomeUnknown {
			// The start may have been applied: the run says whether it was.
			return s.answer(s.unknownStart(ctx, a, run, *in.Input, deadline, asWeft(err)), keyed)
		}
		return s.refuse(err), nil // definitely not started
	}
	return s.answer(s.follow(ctx, run, deadline), keyed)
}

// unknownStart answers a call whose start's outcome is not known (startErr:
// unavailable, internal, outcome_unknown): it reads the run, never
// guesses. A run whose view is read was started — by this call, or by an
// earlier one with the same key and input — and is followed as after a
// start; one with another agent or input under this key is key_reused. A
// run whose view cannot be read within the wait is "not known", with the
// start's error.
func (s *Server) unknownStart(ctx context.Context, a Agent, run, input string, deadline time.Time, startErr *weft.Error) Answer {
	v, err := s.view(ctx, run, deadline)
	switch {
	case err != nil:
		return Answer{Status: StatusUnknown, Run: run, Agent: a.Name, Error: startErr}
	case v.Agent.Name != a.Name || v.Input != input:
		return Answer{Status: StatusRefused, Error: keyReused()}
	}
	return s.follow(ctx, run, deadline)
}

// keyReused is the refusal of a key used before for another input or
// another agent.
func keyReused() *weft.Error {
	return weft.Errorf(weft.CodeKeyReused, "this key was used before for another input or another agent; repeat that input to reopen its run, or use a new key")
}

// status answers one call of the status tool. It acts on nothing, so an
// answer that is not known is an isError result like a refusal.
func (s *Server) status(ctx context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult {
	var in struct {
		Run string `json:"run"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Run == "" {
		return s.refuse(weft.Errorf(weft.CodeInvalidRequest, "the arguments must be {\"run\": run id}"))
	}
	deadline := time.Now().Add(s.cfg.Wait)
	qctx, cancel := context.WithDeadline(ctx, deadline)
	v, err := s.client.Run(qctx, in.Run)
	cancel()
	if err != nil {
		return s.refuse(err)
	}
	if !s.served[v.Agent.Name] {
		// Only the runs of the agents this server serves are its business.
		return s.refuse(weft.Errorf(weft.CodeUnknownRun, "no run %s of an agent this server serves", in.Run))
	}
	return s.result(s.follow(ctx, in.Run, deadline), false)
}

// errNoAnswer is the error of a wait in which the query service answered
// nothing.
var errNoAnswer = &weft.Error{Code: weft.CodeUnavailable, Message: "the query service did not answer within the wait"}

// view returns the run's view, waiting until the read model has it (a run
// just started may not be projected yet) and the query service answers, or
// deadline passes: then the error is the last answer (unknown_run,
// unavailable), never a guess.
func (s *Server) view(ctx context.Context, run string, deadline time.Time) (projections.RunView, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var lastErr error = errNoAnswer
	pause := backoff.New(20*time.Millisecond, 500*time.Millisecond)
	for {
		v, err := s.client.Run(ctx, run)
		switch {
		case err == nil:
			return v, nil
		case ctx.Err() != nil:
			// The wait ended during the query: it says nothing.
		case transient(err):
			lastErr = err
		default:
			return v, err
		}
		if pause.Wait(ctx) != nil || !time.Now().Before(deadline) {
			return projections.RunView{}, lastErr
		}
	}
}

// follow waits until the run (with its children) is finished or suspended
// in views that have caught up with the log (caughtUp), or deadline passes,
// and returns what it then is: settled; working when the last view the read
// model gave says so, or says settled but lags the log (ask again);
// unknown, naming the run, when no view of it was read in time (the read
// model has not caught up, or the query service does not answer). Every
// query is bounded by deadline; nothing is guessed.
func (s *Server) follow(ctx context.Context, run string, deadline time.Time) Answer {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var seen bool
	var agentName string
	var lastErr error = errNoAnswer
	// childErr is the unknown_run of a child run the family lists, at the
	// last read: asked again until the deadline, then the answer.
	var childErr error
	pause := backoff.New(20*time.Millisecond, 500*time.Millisecond)
	for {
		fam, err := s.client.RunFamily(ctx, run)
		switch {
		case err == nil:
			seen, agentName, childErr = true, fam.View.Agent.Name, nil
			switch fam.FamilyStatus.Status {
			case projections.StatusFinished, projections.StatusSuspended:
				// A suspended run with nothing listed is a view caught
				// between two events of one step: look again.
				ans, err := s.settled(ctx, fam)
				switch {
				case errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}):
					// A read-model replica that has not projected the
					// child yet answers unknown_run too: asked again
					// within the wait, answered if it lasts.
					childErr = err
				case err != nil:
					// A child run it waits for cannot be read, and never
					// will be by asking again: the error, not "working"
					// for ever.
					return Answer{Status: StatusUnknown, Run: run, Agent: agentName, Error: asWeft(err)}
				case ans.Status != StatusWorking:
					return ans
				}
			}
		case ctx.Err() != nil:
			// The wait ended during the query: it says nothing.
		case transient(err):
			lastErr = err
		default:
			return Answer{Status: StatusUnknown, Run: run, Agent: agentName, Error: asWeft(err)}
		}
		if pause.Wait(ctx) != nil || !time.Now().Before(deadline) {
			break
		}
	}
	if childErr != nil {
		return Answer{Status: StatusUnknown, Run: run, Agent: agentName, Error: asWeft(childErr)}
	}
	if seen {
		return Answer{Status: StatusWorking, Run: run, Agent: agentName}
	}
	return Answer{Status: StatusUnknown, Run: run, Error: asWeft(lastErr)}
}

// settled turns a finished or suspended run into its answer, with the
// approvals and uncertain effects of the run and of the child runs it waits
// for. It answers working (not settled yet) when one of those views lags
// the log (caughtUp) or a child's view could not be read yet (the wait
// ended, or a retryable code); a child whose read failed otherwise (such as
// unknown_run, which follow asks again within the wait) is that error.
func (s *Server) settled(ctx context.Context, fam projector.RunReply) (Answer, error) {
	v := fam.View
	ans := Answer{Run: v.Run, Agent: v.Agent.Name}
	if ok, err := s.collect(ctx, fam, &ans, 0); !ok {
		return Answer{Status: StatusWorking, Run: v.Run, Agent: v.Agent.Name}, err
	}
	switch {
	case v.Status == projections.StatusFinished && v.Outcome != nil && v.Outcome.Kind == events.OutcomeCompleted:
		ans.Status, ans.Answer, ans.Outcome = StatusCompleted, v.Outcome.Answer, v.Outcome
	case v.Status == projections.StatusFinished:
		ans.Status, ans.Outcome = StatusEnded, v.Outcome
	case len(ans.Uncertain) > 0:
		ans.Status = StatusUncertain
	case len(ans.Approvals) > 0:
		ans.Status = StatusWaitingForApproval
	default:
		// Suspended with nothing listed (a view between two events of
		// one step, or a child's view that lags): not settled yet.
		ans.Status = StatusWorking
	}
	return ans, nil
}

// collect adds to ans the approvals and uncertain effects of fam's run and
// of the child runs it waits for, and reports whether every view it read
// has caught up with its run's log. A child run whose view could not be
// read is not caught up; unless the read failed for a transient reason
// (transient: the query service did not answer, the wait ended) its error
// is returned too.
func (s *Server) collect(ctx context.Context, fam projector.RunReply, ans *Answer, depth int) (bool, error) {
	v := fam.View
	if !s.caughtUp(ctx, v) {
		return false, nil
	}
	for _, a := range v.Actions {
		switch {
		case a.State == projections.StateAwaitingApproval && a.Pending != nil:
			ans.Approvals = append(ans.Approvals, Approval{Run: v.Run, Action: a.ID, Tool: a.Tool, Arguments: a.Arguments,
				Requirement: a.Pending.Requirement, Revision: a.Pending.Revision, Expires: a.Pending.Expires,
				Command: s.cfg.ApproveCommand(v.Run, a.ID, a.Pending.Revision)})
		case a.State == projections.StateUncertain:
			ans.Uncertain = append(ans.Uncertain, Uncertain{Run: v.Run, Action: a.ID, Tool: a.Tool, Arguments: a.Arguments, Evidence: a.Evidence,
				Command: fmt.Sprintf("weft reconcile %s %s --output JSON | --error MESSAGE | --unconfirmed NOTE", v.Run, a.ID)})
		}
	}
	if depth >= projector.MaxFamilyDepth {
		return true, nil
	}
	for _, child := range fam.FamilyStatus.Waiting {
		cf, err := s.client.RunFamily(ctx, child)
		switch {
		case err != nil && (ctx.Err() != nil || weft.ErrorCode(err).Retryable()):
			// Not read yet: what it waits for is not known yet.
			return false, nil
		case err != nil:
			// The family listed this child as waiting, so the read model
			// has its view: a refusal such as unknown_run says it cannot
			// be read at all.
			we := asWeft(err)
			return false, &weft.Error{Code: we.Code, Reason: we.Reason, Message: fmt.Sprintf("child run %s, which run %s waits for, cannot be read: %s", child, v.Run, we.Message)}
		}
		if ok, err := s.collect(ctx, cf, ans, depth+1); !ok {
			return false, err
		}
	}
	return true, nil
}

// transient reports whether a failed read of a run's view may succeed
// when asked again within the wait: a retryable code (weft.Code.Retryable),
// or unknown_run for the run this call started or follows, which the read
// model may not have projected yet.
func transient(err error) bool {
	return errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) || weft.ErrorCode(err).Retryable()
}

// caughtUp is client.CaughtUp, false when the log's head cannot be read.
func (s *Server) caughtUp(ctx context.Context, v projections.RunView) bool {
	ok, err := s.client.CaughtUp(ctx, v)
	return err == nil && ok
}

func asWeft(err error) *weft.Error {
	var we *weft.Error
	if errors.As(err, &we) {
		return we
	}
	return &weft.Error{Code: weft.CodeInternal, Message: err.Error()}
}

// refuse answers a refused call: nothing was started or reopened.
func (s *Server) refuse(err error) *mcp.CallToolResult {
	return s.result(Answer{Status: StatusRefused, Error: asWeft(err)}, false)
}

// answer renders the answer of an agent tool's call (keyed says whether the
// call had a key): StatusUnknown as the JSON-RPC error CodeOutcomeUnknown,
// whose data is ans, so that no client reads it as a definite failure;
// every other status as a result.
func (s *Server) answer(ans Answer, keyed bool) (*mcp.CallToolResult, error) {
	if ans.Status == StatusUnknown {
		data, err := json.Marshal(ans)
		if err != nil {
			data = nil
		}
		return nil, &jsonrpc.Error{Code: CodeOutcomeUnknown, Message: s.text(ans, keyed), Data: data}
	}
	return s.result(ans, keyed), nil
}

// freshRunID is the run id of a call without a key: random, so every such
// call is a new run, and known before the start so that a start whose
// answer was lost can still be asked about.
func freshRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// result renders ans as a tool result: the plain text, the structured
// content, and the run id and status in _meta.
func (s *Server) result(ans Answer, keyed bool) *mcp.CallToolResult {
	r := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: s.text(ans, keyed)}},
		StructuredContent: ans,
		IsError:           ans.Status == StatusRefused || ans.Status == StatusEnded || ans.Status == StatusUnknown,
		Meta:              mcp.Meta{MetaStatus: ans.Status},
	}
	if ans.Run != "" {
		r.Meta[MetaRun] = ans.Run
	}
	return r
}

// again says how to ask about run again: the same call with the same key
// (only for a keyed call: an unkeyed one repeated is a new run), or the
// status tool.
func (s *Server) again(run string, keyed bool) string {
	var ways []string
	if keyed {
		ways = append(ways, "repeat this call with the same key")
	}
	if s.cfg.StatusTool != "-" {
		ways = append(ways, fmt.Sprintf("call %s with {\"run\": %q}", s.cfg.StatusTool, run))
	}
	if len(ways) == 0 {
		return fmt.Sprintf("ask an operator (weft show %s)", run)
	}
	return strings.Join(ways, ", or ")
}

// text is the plain-language answer the model reads.
func (s *Server) text(ans Answer, keyed bool) string {
	again := s.again(ans.Run, keyed)
	var b strings.Builder
	switch ans.Status {
	case StatusCompleted:
		fmt.Fprintf(&b, "Completed (run %s). The answer:\n%s", ans.Run, answerText(ans.Answer))
	case StatusWaitingForApproval:
		fmt.Fprintf(&b, "Waiting for approval (run %s): nothing more happens until a person answers.", ans.Run)
	case StatusUncertain:
		fmt.Fprintf(&b, "Uncertain (run %s): the effect of %d action(s) may or may not have happened; the run waits until a person reconciles them. Do not report them as done or as failed.", ans.Run, len(ans.Uncertain))
	case StatusWorking:
		fmt.Fprintf(&b, "Still working (run %s). Ask again later: %s.", ans.Run, again)
	case StatusEnded:
		fmt.Fprintf(&b, "The run %s ended %s without an answer.", ans.Run, outcomeText(ans.Outcome))
	case StatusRefused:
		fmt.Fprintf(&b, "Refused: %s.", ans.Error.Error())
		if ans.Error.Code == weft.CodeKeyReused {
			b.WriteString(" Nothing was started.")
		}
	case StatusUnknown:
		if ans.Run == "" {
			fmt.Fprintf(&b, "Not known: this key names a run whose agent and input could not be read in time (%s), so whether it is this input's run is not known; this call started nothing. To find out, repeat this call with the same key.", ans.Error.Error())
			break
		}
		fmt.Fprintf(&b, "Not known (run %s): whether the run started, or how it stands, could not be read in time (%s). Nothing is known to have failed: do not report it as done or as failed. To find out, %s.", ans.Run, ans.Error.Error(), again)
	}
	for _, a := range ans.Approvals {
		fmt.Fprintf(&b, "\n- approval needed: run %s action %s calls %s with %s; requirement %s v%d, revision %d", a.Run, a.Action, a.Tool, a.Arguments, a.Requirement.Name, a.Requirement.Version, a.Revision)
		if a.Expires != nil {
			fmt.Fprintf(&b, ", expires %s", a.Expires.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(&b, ". A person approves with: %s", a.Command)
	}
	for _, u := range ans.Uncertain {
		fmt.Fprintf(&b, "\n- effect uncertain: run %s action %s called %s with %s; evidence: %s. A person reconciles with: %s", u.Run, u.Action, u.Tool, u.Arguments, u.Evidence, u.Command)
	}
	if ans.Status == StatusWaitingForApproval || ans.Status == StatusUncertain {
		fmt.Fprintf(&b, "\nOnce a person has acted, %s.", again)
	}
	return b.String()
}

func answerText(a json.RawMessage) string {
	var s string
	if json.Unmarshal(a, &s) == nil {
		return s
	}
	return string(a)
}

func outcomeText(o *events.Outcome) string {
	if o == nil {
		return "(outcome unknown)"
	}
	if o.Reason != "" {
		return o.Kind + "(" + o.Reason + ")"
	}
	return o.Kind
}
