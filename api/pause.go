package api

import (
	"context"
	"errors"

	"github.com/weftrun/weft/events"
)

// EndpointPause pauses a run (docs/semantics.md §13).
const EndpointPause = "pause"

// EndpointResume resumes a paused run.
const EndpointResume = "resume"

// PauseRequest pauses a run: it starts no model call and no tool body until
// resumed (docs/semantics.md §13). Pausing a paused run records nothing and
// answers its status.
type PauseRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id"`
	Run       string `json:"run"`
	Reason    string `json:"reason,omitempty"`
	By        string `json:"by,omitempty"`
	// Proof is a signed command proof, as for CancelRequest.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

// ResumeRequest resumes a paused run. Resuming a run that is not paused
// records nothing and answers its status.
type ResumeRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id"`
	Run       string `json:"run"`
	Reason    string `json:"reason,omitempty"`
	By        string `json:"by,omitempty"`
	// Proof is a signed command proof, as for CancelRequest.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

func (s *service) pause(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *PauseRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkPerson(req.Run, req.Reason, req.By, req.Proof); err != nil {
		return nil, "", err
	}
	rep, err := s.b.Pause(ctx, req)
	return rep, req.CommandID, err
}

func (s *service) resume(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *ResumeRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkPerson(req.Run, req.Reason, req.By, req.Proof); err != nil {
		return nil, "", err
	}
	rep, err := s.b.Resume(ctx, req)
	return rep, req.CommandID, err
}

// checkPerson checks a person's command on a run that carries only a
// reason, an author and its command proof (cancel, pause, resume).
func checkPerson(run, reason, by string, p *events.CommandProof) error {
	if err := errors.Join(bounded(field{"reason", reason, MaxReason}, field{"by", by, MaxID}), boundedProof(p)); err != nil {
		return firstCoded(err)
	}
	return checkRun(run)
}

// Pause pauses a run.
func (c *Client) Pause(ctx context.Context, req PauseRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointPause, req, &r)
}

// Resume resumes a paused run.
func (c *Client) Resume(ctx context.Context, req ResumeRequest) (Reply, error) {
	req.Schema = Schema
	c.commandID(&req.CommandID)
	var r Reply
	return r, c.call(ctx, EndpointResume, req, &r)
}
