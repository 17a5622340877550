package api

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// EndpointHold places a legal hold on a run (docs/security.md, "Retention
// and legal hold"; docs/adr/0030-retention-and-legal-hold.md).
const EndpointHold = "hold"

// EndpointReleaseHold releases a run's legal hold.
const EndpointReleaseHold = "release_hold"

// HoldRequest places a legal hold on a run: retention keeps the run and
// its family until the hold is released. Reason is required, and who
// places it: By, or a signed command proof (Proof, stating
// proof.HoldSubject) by one of the deployment's person keys, which records
// the key's person verified (docs/security.md, "Who did it"). A
// hold is not an event of the run: it is kept in the weft_holds bucket
// (docs/adr/0030 §5). A retry with the same command id answers the same
// hold, which records the command id (so at any time, not only while the
// reply is kept); another command id places another hold beside it.
type HoldRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id"`
	Run       string `json:"run"`
	Reason    string `json:"reason"`
	By        string `json:"by,omitempty"`
	// Proof is a signed command proof, as for CancelRequest.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

// ReleaseHoldRequest releases a run's legal hold Hold (its id, h1, h2,
// ...; empty when the run has one active hold, unsigned only). Reason and
// who are required, as for HoldRequest (a proof states
// proof.ReleaseHoldSubject, and a signed release names its hold:
// invalid_request otherwise); the placement and the release stay in the
// bucket's history.
type ReleaseHoldRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id"`
	Run       string `json:"run"`
	Hold      string `json:"hold,omitempty"`
	Reason    string `json:"reason"`
	By        string `json:"by,omitempty"`
	// Proof is a signed command proof, as for CancelRequest.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

// HoldReply is the hold placed or released.
type HoldReply struct {
	Schema int    `json:"schema"`
	Run    string `json:"run"`
	// Hold is the hold's id among the run's holds (h1, h2, ...).
	Hold string `json:"hold"`
	// By is who placed it: Verified (and Key) when the deployment vouched
	// for it (a signed command proof by one of its person keys), else the
	// name typed.
	By       string    `json:"by"`
	Verified bool      `json:"verified,omitempty"`
	Key      string    `json:"key,omitempty"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// Released says who released the hold, why and when (nil: active).
	Released *HoldRelease `json:"released,omitempty"`
}

// HoldRelease is who released a hold (Verified and Key as for
// HoldReply), why and when.
type HoldRelease struct {
	By       string    `json:"by"`
	Verified bool      `json:"verified,omitempty"`
	Key      string    `json:"key,omitempty"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// HoldBackend places and releases legal holds. The runner implements it;
// a Backend without it answers the hold endpoints unavailable.
type HoldBackend interface {
	// Hold places a legal hold on a run.
	Hold(ctx context.Context, req HoldRequest) (HoldReply, error)
	// ReleaseHold releases a run's legal hold.
	ReleaseHold(ctx context.Context, req ReleaseHoldRequest) (HoldReply, error)
}

func (s *service) hold(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *HoldRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkHolder(req.Run, req.Reason, req.By, req.CommandID, req.Proof); err != nil {
		return nil, "", err
	}
	hb, ok := s.b.(HoldBackend)
	if !ok {
		return nil, "", &weft.Error{Code: weft.CodeUnavailable, Message: "this service keeps no legal holds"}
	}
	rep, err := hb.Hold(ctx, req)
	rep.Schema = Schema
	return rep, req.CommandID, err
}

func (s *service) releaseHold(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *ReleaseHoldRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := errors.Join(checkHolder(req.Run, req.Reason, req.By, req.CommandID, req.Proof), bounded(field{"hold", req.Hold, MaxID})); err != nil {
		return nil, "", firstCoded(err)
	}
	if req.Proof != nil && req.Hold == "" {
		// A proof of "the run's one active hold" would release any hold
		// that is the one active when it is sent, one placed after it was
		// signed included.
		return nil, "", &weft.Error{Code: weft.CodeInvalidRequest, Message: "hold: a signed release names its hold (the proof states it)"}
	}
	hb, ok := s.b.(HoldBackend)
	if !ok {
		return nil, "", &weft.Error{Code: weft.CodeUnavailable, Message: "this service keeps no legal holds"}
	}
	rep, err := hb.ReleaseHold(ctx, req)
	rep.Schema = Schema
	return rep, req.CommandID, err
}

// checkHolder checks a hold's or release's run, reason and author (both
// required: docs/adr/0030 §5; who is by, or the key of its proof p) and
// its command id (required: a hold is not idempotent by itself, so only
// its command id makes a retry safe).
func checkHolder(run, reason, by, commandID string, p *events.CommandProof) error {
	if err := checkPerson(run, reason, by, p); err != nil {
		return err
	}
	switch {
	case reason == "" || (by == "" && p == nil):
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: "a legal hold and its release need a reason and who (by, or a signed proof)"}
	case commandID == "":
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: "a legal hold and its release need a command_id (a retry with it answers the same hold)"}
	}
	return nil
}

// Hold places a legal hold on a run (EndpointHold).
func (c *Client) Hold(ctx context.Context, req HoldRequest) (HoldReply, error) {
	req.Schema = Schema
	if req.CommandID == "" {
		req.CommandID = NewCommandID()
	}
	var r HoldReply
	return r, c.call(ctx, EndpointHold, req, &r)
}

// ReleaseHold releases a run's legal hold (EndpointReleaseHold).
func (c *Client) ReleaseHold(ctx context.Context, req ReleaseHoldRequest) (HoldReply, error) {
	req.Schema = Schema
	if req.CommandID == "" {
		req.CommandID = NewCommandID()
	}
	var r HoldReply
	return r, c.call(ctx, EndpointReleaseHold, req, &r)
}
