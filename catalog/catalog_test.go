package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
)

// The catalog answers the demo agent's tools with their output schemas and
// its approvers, and refuses an agent or version it does not serve.
func TestServeAnswersToolsAndApprovers(t *testing.T) {
	s := natstest.Start(t)
	ag, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := catalog.Serve(s.Conn, []*agent.Agent{ag})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := catalog.NewClient(s.Conn)
	e, err := c.Agent(ctx, events.AgentRef{Name: demo.AgentName})
	if err != nil {
		t.Fatal(err)
	}
	if e.Agent != ag.Ref() || len(e.Approvers) != 1 || e.Approvers[0] != demo.Approver || len(e.Signed) != 0 {
		t.Fatalf("entry %+v", e)
	}
	send, ok := e.Tool("send_payment")
	if !ok {
		t.Fatalf("no send_payment in %+v", e.Tools)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(send.OutputSchema, &schema); err != nil {
		t.Fatalf("output schema %s: %v", send.OutputSchema, err)
	}
	if schema.Type != "object" || len(schema.Properties) != 2 || len(schema.Required) != 2 {
		t.Fatalf("send_payment output schema %s", send.OutputSchema)
	}
	if refund, _ := e.Tool("refund"); !refund.Settling {
		t.Fatalf("refund is a settling tool: %+v", refund)
	}
	if len(send.InputSchema) == 0 {
		t.Fatal("no input schema")
	}

	_, err = c.Agent(ctx, events.AgentRef{Name: demo.AgentName, Version: "9"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeUnknownAgent}) {
		t.Fatalf("version 9: %v, want unknown_agent", err)
	}
	_, err = c.Agent(ctx, events.AgentRef{Name: "nobody"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeUnknownAgent}) {
		t.Fatalf("agent nobody: %v, want unknown_agent", err)
	}
}

// An approver of signed proofs is listed with its proof lifetime; one that
// takes a credential is not.
func TestSignedApproversListed(t *testing.T) {
	s := natstest.Start(t)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ag, err := agent.New("signed-desk", model.NewScripted("m"), demo.Tools(), demo.Policy(),
		agent.WithApprovers(approvers.Trusting("desk"), approvers.Signed("keys", []approvers.Key{{Public: pub}}, approvers.WithLifetime(90*time.Second)))).Build()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := catalog.Serve(s.Conn, []*agent.Agent{ag})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := catalog.NewClient(s.Conn).Agent(ctx, events.AgentRef{Name: "signed-desk"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Approvers) != 2 || len(e.Signed) != 1 || e.Signed[0] != (catalog.SignedApprover{Name: "keys", LifetimeSeconds: 90}) {
		t.Fatalf("approvers %v, signed %+v", e.Approvers, e.Signed)
	}
	if _, ok := e.SignedApprover("desk"); ok {
		t.Error("desk takes a credential, not a proof")
	}
	if sa, ok := e.SignedApprover("keys"); !ok || sa.LifetimeSeconds != 90 {
		t.Errorf("keys: %+v, %v", sa, ok)
	}
}

// docs/protocol/45-catalog.md: bad input gets a clear error — a body of
// JSON null is refused invalid_request (it was read as {} and answered
// the entry).
func TestNullBodyIsRefused(t *testing.T) {
	s := natstest.Start(t)
	ag, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := catalog.Serve(s.Conn, []*agent.Agent{ag})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	m, err := s.Conn.Request(catalog.SubjectPrefix+demo.AgentName, []byte("null"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Error *weft.Error `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != weft.CodeInvalidRequest {
		t.Fatalf("a null body answered %s (%v), want invalid_request", m.Data, err)
	}
}
