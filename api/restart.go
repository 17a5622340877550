package api

import (
	"context"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// EndpointRestart restarts a finished run as a new run from the state
// before one of its model turns (docs/semantics.md §14,
// docs/adr/0029-restart-from-a-step.md).
const EndpointRestart = "restart"

// RestartRequest restarts the finished run From.Run as a new run Run from
// the state before its model turn From.Turn: the new run's log starts with
// the parent's conversation up to that turn (the effects before it are not
// run again, their results are in the transcript) and asks the model that
// turn again. Answered like a start: idempotent by command id, and
// already_started for a run id that exists.
type RestartRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id,omitempty"`
	// Run is the new run's id (1–128 of [A-Za-z0-9_-]); empty to have one
	// generated.
	Run string `json:"run,omitempty"`
	// From is the finished run and the turn to restart from.
	From RestartFrom `json:"from"`
	// Version is the version of the parent's agent the new run is bound
	// to; empty: the version the runners serve now.
	Version string `json:"version,omitempty"`
	// Correlation is the caller's correlation id (tracing only).
	Correlation string `json:"correlation,omitempty"`
	// Reason, By and Proof are who restarts it and why, as for
	// CancelRequest (docs/security.md, "Who did it"): recorded in the new
	// run's RunForked. A proof states proof.RestartSubject (the parent,
	// the turn and the new run), so a signed restart names its new run.
	Reason string               `json:"reason,omitempty"`
	By     string               `json:"by,omitempty"`
	Proof  *events.CommandProof `json:"proof,omitempty"`
}

// RestartFrom names a finished run and one of its model turns (1 up to
// its last turn + 1, which continues after the whole run).
type RestartFrom struct {
	Run  string `json:"run"`
	Turn int64  `json:"turn"`
}

func (s *service) restart(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *RestartRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := bounded(field{"correlation", req.Correlation, MaxID}); err != nil {
		return nil, "", err
	}
	if err := checkPerson(req.From.Run, req.Reason, req.By, req.Proof); err != nil {
		return nil, "", err
	}
	if req.Proof != nil && req.Run == "" {
		return nil, "", &weft.Error{Code: weft.CodeInvalidRequest, Message: "run: a signed restart names its new run (the proof states it)"}
	}
	if req.Run != "" {
		if err := checkRun(req.Run); err != nil {
			return nil, "", err
		}
	}
	if err := checkRun(req.From.Run); err != nil {
		return nil, "", err
	}
	if req.From.Turn < 1 {
		return nil, "", &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("from.turn %d: a turn is 1 or more", req.From.Turn)}
	}
	if req.Run != "" && req.Run == req.From.Run {
		return nil, "", &weft.Error{Code: weft.CodeInvalidRequest, Message: "run: a restart is a new run, not " + req.From.Run}
	}
	if req.Version != "" && !validToken(req.Version, true) {
		return nil, "", &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("version %q: a version is 1 to 64 characters of [A-Za-z0-9_.-]", req.Version)}
	}
	rep, err := s.b.Restart(ctx, req)
	return rep, req.CommandID, err
}

// Restart restarts a finished run from one of its turns as a new run. The
// new run's id is chosen as Start chooses it: a retrying Client names it
// when req.Run is empty, so that every try restarts into the same run, and
// an error's reply names the run to read after outcome_unknown.
func (c *Client) Restart(ctx context.Context, req RestartRequest) (StartReply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	return c.startRun(ctx, EndpointRestart, &req.Run, &req)
}
