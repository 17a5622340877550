// Package catalog tells clients what the agents a process serves are made
// of: each agent's tools (name, description, input and output JSON Schema,
// whether it settles) and the names of its approvers, saying which take
// signed approval proofs. It is the NATS micro
// service "weft-catalog", one request/reply endpoint per agent name under
// weft.api.catalog.<agent>, and Client, its Go client.
//
// The operator console builds its reconciliation form from a tool's output
// schema and offers the agent's approvers by name; nothing here is needed to
// run agents. A process that serves agents (weft dev, cmd/runner, an
// application embedding the runner) serves their catalog with Serve;
// docs/protocol/45-catalog.md is the wire reference.
package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/tools"
)

const (
	// ServiceName is the micro service's name ("nats micro ls").
	ServiceName = "weft-catalog"
	// SubjectPrefix prefixes every endpoint: weft.api.catalog.<agent name>.
	SubjectPrefix = "weft.api.catalog."
	// ServiceVersion is the micro service's version (SemVer).
	ServiceVersion = "1.0.0"
	// Schema is the schema version of requests and replies.
	Schema = 1
)

// Refusals returns the error codes every catalog endpoint may answer: the
// "sent by" entry catalog.<agent> of docs/protocol.md's error table, which
// a test keeps equal. The slice is a fresh copy on every call.
func Refusals() []weft.Code { return slices.Clone(refusals) }

// refusals is the list Refusals copies.
var refusals = []weft.Code{weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeUnknownAgent}

// MaxBody is the largest catalog request body accepted (bytes): 64 KiB,
// as a query's (projector.MaxQueryBody); a request names a version only.
const MaxBody = 64 << 10

// Request asks for one agent's catalog entry. Version is optional: empty
// names the one version the answering process serves.
type Request struct {
	Schema  int    `json:"schema,omitempty"`
	Version string `json:"version,omitempty"`
}

// Tool describes one tool of an agent.
type Tool struct {
	// Name is the name the model calls the tool by.
	Name string `json:"name"`
	// Description is what the model reads about the tool.
	Description string `json:"description"`
	// InputSchema is the JSON Schema of the tool's arguments.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// OutputSchema is the JSON Schema of the tool's output: the shape of a
	// reconciliation's "output" content. Absent for a delegation (a
	// sub-agent), whose result is the child run's outcome.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Settling reports whether the tool settles asynchronously.
	Settling bool `json:"settling,omitempty"`
	// Agent names the sub-agent a delegation starts; nil for other tools.
	Agent *events.AgentRef `json:"agent,omitempty"`
}

// Entry is one agent's catalog entry, the reply of weft.api.catalog.<agent>.
type Entry struct {
	Schema int             `json:"schema"`
	Agent  events.AgentRef `json:"agent"`
	// Tools are the agent's tools in the agent's order.
	Tools []Tool `json:"tools"`
	// Approvers are the names an approve or reject may give as "approver".
	Approvers []string `json:"approvers"`
	// Signed are the approvers of Approvers that take signed approval
	// proofs (approvers.Signed, docs/security.md) instead of a credential,
	// with how long a proof may live; absent when none does.
	Signed []SignedApprover `json:"signed_approvers,omitempty"`
}

// SignedApprover is an approver that takes signed approval proofs: an
// answer naming it carries a proof signed by a key it trusts, expiring at
// most LifetimeSeconds after the answer is recorded.
type SignedApprover struct {
	Name            string `json:"name"`
	LifetimeSeconds int    `json:"lifetime_s"`
}

// SignedApprover returns the entry's signed approver called name, and
// false when name takes a credential (or is not the agent's).
func (e Entry) SignedApprover(name string) (SignedApprover, bool) {
	for _, s := range e.Signed {
		if s.Name == name {
			return s, true
		}
	}
	return SignedApprover{}, false
}

// Tool returns the entry's tool called name.
func (e Entry) Tool(name string) (Tool, bool) {
	for _, t := range e.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Describe returns the catalog entry of a built agent.
func Describe(a *agent.Agent) Entry {
	e := Entry{Schema: Schema, Agent: a.Ref(), Tools: []Tool{}, Approvers: []string{}}
	for _, t := range a.Tools() {
		spec := t.Spec()
		ct := Tool{Name: spec.Name, Description: spec.Description, InputSchema: spec.InputSchema, Settling: t.Settling()}
		if child, ok := agent.SubAgent(t); ok {
			ref := child.Ref()
			ct.Agent = &ref
		} else {
			ct.OutputSchema = tools.OutputSchema(t)
		}
		e.Tools = append(e.Tools, ct)
	}
	for _, ap := range a.Approvers() {
		e.Approvers = append(e.Approvers, ap.Name())
		if ap.IsSigned() {
			e.Signed = append(e.Signed, SignedApprover{Name: ap.Name(), LifetimeSeconds: int(ap.Lifetime() / time.Second)})
		}
	}
	return e
}

// Serve adds the "weft-catalog" micro service to nc, with one endpoint per
// agent name among agents and their sub-agents, until the returned service
// is stopped. Processes serving the same agents share the queue group
// "weft-catalog"; a request goes to one process that serves the name.
func Serve(nc *nats.Conn, agents []*agent.Agent) (micro.Service, error) {
	byName := map[string][]Entry{}
	var names []string
	var add func(a *agent.Agent)
	add = func(a *agent.Agent) {
		for _, e := range byName[a.Name()] {
			if e.Agent.Version == a.Version() {
				return
			}
		}
		if byName[a.Name()] == nil {
			names = append(names, a.Name())
		}
		byName[a.Name()] = append(byName[a.Name()], Describe(a))
		for _, sub := range a.SubAgents() {
			add(sub)
		}
	}
	for _, a := range agents {
		add(a)
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "Weft catalog: the tools, schemas and approvers of the agents served",
		QueueGroup:  ServiceName,
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: add service: %w", err)
	}
	for _, name := range names {
		entries := byName[name]
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { answer(r, name, entries) }),
			micro.WithEndpointSubject(SubjectPrefix+name),
			micro.WithEndpointMetadata(map[string]string{"schema": "1"}))
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("catalog: endpoint %s: %w", name, err)
		}
	}
	return svc, nil
}

func answer(r micro.Request, name string, entries []Entry) {
	var req Request
	if n := len(r.Data()); n > MaxBody {
		respondError(r, 413, &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("body of %d bytes is over the %d byte limit of a catalog request", n, MaxBody)})
		return
	}
	if len(r.Data()) > 0 {
		if !json.Valid(r.Data()) {
			respondError(r, 400, &weft.Error{Code: weft.CodeInvalidJSON, Message: "the body is not JSON"})
			return
		}
		if string(bytes.TrimSpace(r.Data())) == "null" {
			// null decodes to no request at all: say so rather than read it as {}.
			respondError(r, 400, &weft.Error{Code: weft.CodeInvalidRequest, Message: `the body is null, not a catalog request: send {} or {"schema":1,"version":"<version>"}`})
			return
		}
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			respondError(r, 400, &weft.Error{Code: weft.CodeInvalidRequest, Message: "the body is not a catalog request: " + err.Error()})
			return
		}
	}
	if req.Schema != 0 && req.Schema != Schema {
		respondError(r, 400, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("schema must be %d, got %d", Schema, req.Schema)})
		return
	}
	var versions []string
	for _, e := range entries {
		versions = append(versions, e.Agent.Version)
		if e.Agent.Version == req.Version || (req.Version == "" && len(entries) == 1) {
			b, _ := json.Marshal(e)
			_ = r.Respond(b)
			return
		}
	}
	slices.Sort(versions)
	if req.Version == "" {
		respondError(r, 400, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("agent %s: version is required (served: %s)", name, strings.Join(versions, ", "))})
		return
	}
	respondError(r, 404, &weft.Error{Code: weft.CodeUnknownAgent, Message: fmt.Sprintf("agent %s version %s is not served here (served: %s)", name, req.Version, strings.Join(versions, ", "))})
}

func respondError(r micro.Request, status int, e *weft.Error) {
	body, _ := json.Marshal(api.ErrorReply{Schema: Schema, Error: e})
	_ = r.Error(fmt.Sprint(status), string(e.Code), body)
}
