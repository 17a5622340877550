// Package api is Weft's command API: the NATS micro service "weft" whose
// request/reply endpoints under weft.api. start runs and answer them
// (start, approve, reject, reconcile, reconcile_stored, resolve, settle,
// cancel, and report for tool workers), and Client, the small Go client the CLI uses.
//
// It is also the wire protocol's home (docs/adr/0034): every command type
// and reply, the subjects and headers, the task protocol (Task, Report,
// Settlement, Claim, Queue), the one error envelope (ErrorReply, read by
// ReplyError) and the request helper every client uses (Request). Package
// protocol holds the asset names beneath it; weft.Code.Retryable is the
// one table of retryable codes. Packages client and worker build on these
// and re-export none of them.
//
// Bodies are JSON with a "schema" field (1). A success reply is the
// endpoint's reply type; an error reply is {"schema":1,"error":{"code",
// "reason","message","same_input"}} with the Nats-Service-Error and
// Nats-Service-Error-Code headers (the Status table maps codes to the
// header's number). Every command is idempotent by its command_id: the
// first definite reply is kept in the KV bucket weft_commands (24 h) and
// returned again for the same id; retryable refusals (weft.Code.Retryable:
// runner_busy, contended, conflict, unavailable, settle_unconfirmed) and
// internal are not kept, so a retry runs again.
// docs/protocol/40-commands.md is the wire reference.
//
// The service decodes and checks requests and calls a Backend (the
// runner), so that any number of runner processes serve it as one queue
// group.
package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/unanswered"
	"github.com/weftrun/weft/protocol"
)

// CommandsBucket is the KV bucket keeping the replies of commands by
// command id.
const CommandsBucket = protocol.CommandsBucket

// CommandsConfig is the configuration of the weft_commands bucket.
func CommandsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: CommandsBucket, Description: "Weft command replies by command id (idempotency)", TTL: 24 * time.Hour, Storage: jetstream.FileStorage}
}

// Backend executes decoded, checked commands. The runner implements it.
// Every method returns a *weft.Error for a refusal.
type Backend interface {
	// Start starts a run.
	Start(ctx context.Context, req StartRequest) (StartReply, error)
	// Approve answers an approval request with an approval.
	Approve(ctx context.Context, req ApproveRequest) (Reply, error)
	// Reject answers an approval request with a rejection.
	Reject(ctx context.Context, req RejectRequest) (Reply, error)
	// Reconcile records what happened to an uncertain action; stored is
	// the stored-run form.
	Reconcile(ctx context.Context, req ReconcileRequest, stored bool) (Reply, error)
	// Settle offers a settlement.
	Settle(ctx context.Context, req Settlement) (Reply, error)
	// Cancel cancels a run.
	Cancel(ctx context.Context, req CancelRequest) (Reply, error)
	// Report applies a worker's report of an attempt.
	Report(ctx context.Context, req Report) (Reply, error)
	// Resolve records the final truth of an open question.
	Resolve(ctx context.Context, req ResolveRequest) (Reply, error)
	// Pause pauses a run (docs/semantics.md §13).
	Pause(ctx context.Context, req PauseRequest) (Reply, error)
	// Resume resumes a paused run.
	Resume(ctx context.Context, req ResumeRequest) (Reply, error)
	// Restart restarts a finished run from one of its turns as a new run
	// (docs/semantics.md §14).
	Restart(ctx context.Context, req RestartRequest) (StartReply, error)
	// Decide answers one run's part of a batch decision as one decision
	// (all or nothing within the run): the reply has an outcome per item.
	Decide(ctx context.Context, req DecideRun) (DecideRunReply, error)
}

// ServeOption configures Serve.
type ServeOption func(*service)

// WithRequestTimeout bounds how long one request may take to be applied
// and answered (default 30 s).
func WithRequestTimeout(d time.Duration) ServeOption { return func(s *service) { s.timeout = d } }

// DefaultLanes is how many requests of one endpoint a process serves at
// once unless WithLanes says otherwise.
const DefaultLanes = 16

// WithLanes sets how many requests of each endpoint this process serves at
// once (default DefaultLanes, at least 1). A micro endpoint calls its
// handler for one request at a time, so each endpoint is served by n
// endpoints of the service on the same subject and queue group — its
// lanes, named <endpoint>, <endpoint>_2, … <endpoint>_<n> — and NATS
// hands each request to one of them. Requests of one run are still
// decided one at a time (the runner's per-run lock); lanes let different
// runs' commands be decided together, so that their appends can leave
// together (docs/adr/0025-group-commit.md). `nats micro stats weft` lists
// every lane with its own counts.
func WithLanes(n int) ServeOption { return func(s *service) { s.lanes = max(n, 1) } }

// Serve adds the "weft" micro service to nc, answering with b, until the
// returned service is stopped (Service: what its Stop does). kv,
// when not nil, is the weft_commands bucket used for idempotency.
func Serve(nc *nats.Conn, b Backend, kv jetstream.KeyValue, version string, opts ...ServeOption) (Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     version,
		Description: "Weft command API: start runs, answer approvals, reconcile, settle, cancel",
		QueueGroup:  "weft",
	})
	if err != nil {
		return nil, fmt.Errorf("api: add service: %w", err)
	}
	s := &service{b: b, kv: kv, nc: nc, timeout: 30 * time.Second, lanes: DefaultLanes, startsInFlight: DefaultStartsInFlight}
	for _, o := range opts {
		o(s)
	}
	starts := newInFlight(max(s.startsInFlight, s.lanes))
	g := svc.AddGroup("weft.api")
	// addLanes adds the endpoint name on subject (relative to the group)
	// s.lanes times: the first lane keeps the endpoint's name.
	addLanes := func(name, subject string, h micro.HandlerFunc) error {
		for i := 1; i <= s.lanes; i++ {
			lane := name
			if i > 1 {
				lane = fmt.Sprintf("%s_%d", name, i)
			}
			if err := g.AddEndpoint(lane, h, micro.WithEndpointSubject(subject), micro.WithEndpointMetadata(map[string]string{"schema": "1"})); err != nil {
				return err
			}
		}
		return nil
	}
	add := func(name string, h func(context.Context, []byte) (any, string, error)) error {
		return addLanes(name, name, func(r micro.Request) { s.handle(r, h) })
	}
	// A start releases its lane once its decision is queued for the
	// append (ReleaseLane, WithStartsInFlight).
	if err := addLanes(EndpointStart, EndpointStart, func(r micro.Request) { s.serveReleasing(starts, r, s.start) }); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("api: endpoint %s: %w", EndpointStart, err)
	}
	for _, e := range []struct {
		name string
		h    func(context.Context, []byte) (any, string, error)
	}{
		{EndpointApprove, s.approve},
		{EndpointReject, s.reject},
		{EndpointReconcile, func(ctx context.Context, b []byte) (any, string, error) { return s.reconcile(ctx, b, false) }},
		{EndpointReconcileStored, func(ctx context.Context, b []byte) (any, string, error) { return s.reconcile(ctx, b, true) }},
		{EndpointSettle, func(ctx context.Context, b []byte) (any, string, error) { return s.settle(ctx, nil, b) }},
		{EndpointCancel, s.cancel},
		{EndpointReport, func(ctx context.Context, b []byte) (any, string, error) { return s.report(ctx, nil, b) }},
		{EndpointResolve, s.resolve},
		{EndpointPause, s.pause},
		{EndpointResume, s.resume},
		{EndpointRestart, s.restart},
		{EndpointDecide, s.decide},
		{EndpointHold, s.hold},
		{EndpointReleaseHold, s.releaseHold},
	} {
		if err := add(e.name, e.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("api: endpoint %s: %w", e.name, err)
		}
	}
	// The per-queue forms: the queue is the subject's last three tokens.
	for _, e := range []struct {
		name, endpoint string
		h              func(context.Context, *Queue, []byte) (any, string, error)
	}{
		{EndpointReportQueue, EndpointReport, s.report},
		{EndpointSettleQueue, EndpointSettle, s.settle},
	} {
		err := addLanes(e.name, e.endpoint+".*.*.*", func(r micro.Request) {
			q := queueOf(r.Subject())
			s.handle(r, func(ctx context.Context, b []byte) (any, string, error) { return e.h(ctx, q, b) })
		})
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("api: endpoint %s: %w", e.name, err)
		}
	}
	// The lanes' subscriptions leave in the connection's buffer: once
	// Serve returns, the server knows them, so that a request sent from
	// another connection then finds its responders. Best effort: a
	// connection that is reconnecting sends them again when it is back.
	_ = nc.FlushTimeout(10 * time.Second)
	return &served{Service: svc, starts: starts}, nil
}

// queueOf returns the queue named by the last three tokens of a per-queue
// subject weft.api.<endpoint>.<agent>.<version token>.<tool>.
func queueOf(subject string) *Queue {
	t := strings.Split(subject, ".")
	if len(t) != 6 {
		return nil
	}
	return &Queue{Agent: t[3], Version: strings.ReplaceAll(t[4], "~", "."), Tool: t[5]}
}

// errQueueInBody refuses a report or settlement body that names a queue:
// the subject names it.
// namesQueue reports whether a (decoded, so valid) body names "queue" at
// its top level — "queue": null as well, which decodes to no queue but is
// a body naming the field all the same.
func namesQueue(b []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return false
	}
	_, ok := top["queue"]
	return ok
}

var errQueueInBody = &weft.Error{Code: weft.CodeInvalidRequest, Message: "queue is not a body field: report or settle on weft.api.<report|settle>.<agent>.<version token>.<tool>"}

type service struct {
	b              Backend
	kv             jetstream.KeyValue
	nc             *nats.Conn
	timeout        time.Duration
	lanes          int
	startsInFlight int
}

// handle decodes nothing itself: h decodes and returns the reply, the
// command id (for idempotency) and an error.
func (s *service) handle(r micro.Request, h func(context.Context, []byte) (any, string, error)) {
	s.handleReleasing(r, h, nil)
}

// handleReleasing is handle with release, when not nil, the request's
// lane release (ReleaseLane) in h's context.
func (s *service) handleReleasing(r micro.Request, h func(context.Context, []byte) (any, string, error), release func()) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if release != nil {
		ctx = context.WithValue(ctx, laneKey{}, release)
	}
	data := r.Data()
	if err := precheck(data); err != nil {
		respondError(r, err)
		return
	}
	// Idempotency: a repeated command id gets the stored reply.
	var head struct {
		CommandID string `json:"command_id"`
		Run       string `json:"run"`
	}
	_ = json.Unmarshal(data, &head)
	if len(head.CommandID) > MaxID {
		// Refused before the command id is claimed: nothing is written.
		respondError(r, tooLarge("command_id", len(head.CommandID), MaxID))
		return
	}
	body, we := s.once(ctx, r.Subject(), head.Run, head.CommandID, func() (any, bool, error) {
		reply, _, err := h(ctx, data)
		return reply, true, err
	})
	if we != nil {
		respondErrorBody(r, we, body)
		return
	}
	_ = r.Respond(body)
}

// once applies a command at most once for its command id: the reply kept
// for (subject, run, commandID) when there is one, else apply's, kept
// when it is definite (a success, or a refusal keep accepts) and released
// otherwise, so that a retry applies it again; a success apply says not
// to keep (its second result false) is released as well. Without a
// command id (or a bucket) apply simply runs. It returns the reply's body and, for an
// error reply, its error. A batch decision calls it once per run, with the
// batch id as the command id (decide.go).
func (s *service) once(ctx context.Context, subject, run, commandID string, apply func() (any, bool, error)) ([]byte, *weft.Error) {
	key := ""
	if commandID != "" && s.kv != nil {
		sum := sha256.Sum256([]byte(subject + "\x00" + run + "\x00" + commandID))
		key = hex.EncodeToString(sum[:16])
		stored, err := s.claim(ctx, key)
		if err != nil {
			body, _ := json.Marshal(ErrorReply{Schema: Schema, Error: err})
			return body, err
		}
		if stored != nil {
			var er ErrorReply
			if json.Unmarshal(stored, &er) == nil && er.Error != nil {
				return stored, er.Error
			}
			return stored, nil
		}
	}
	reply, definite, err := apply()
	if err != nil {
		var we *weft.Error
		if !errors.As(err, &we) {
			we = uncoded(err)
		}
		body, _ := json.Marshal(ErrorReply{Schema: Schema, Error: we})
		if key != "" {
			if keep(we.Code) {
				s.keepReply(key, body)
			} else {
				s.release(key) // a retry runs again
			}
		}
		return body, we
	}
	body, _ := json.Marshal(reply)
	switch {
	case key == "":
	case definite:
		s.keepReply(key, body)
	default:
		s.release(key)
	}
	return body, nil
}

// uncoded is the answer to an error without a protocol code: a store or
// server that did not answer (a read, or a write before the decision's
// append — an append of unknown outcome is answered by the runner itself)
// is unavailable, nothing applied, retry; anything else is a bug
// (internal). A server killed under a command must not look like a bug.
func uncoded(err error) *weft.Error {
	if unanswered.Is(err) {
		return &weft.Error{Code: weft.CodeUnavailable, Message: "the server did not answer; nothing was applied — retry: " + err.Error()}
	}
	return &weft.Error{Code: weft.CodeInternal, Message: err.Error()}
}

// precheck refuses a body over MaxBody (payload_too_large) or one that is
// not one JSON value (invalid_json), before anything is decoded.
func precheck(data []byte) *weft.Error {
	if len(data) > MaxBody {
		return &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("body of %d bytes is over the %d byte limit", len(data), MaxBody)}
	}
	if !json.Valid(data) {
		return &weft.Error{Code: weft.CodeInvalidJSON, Message: "the body is not valid JSON"}
	}
	return nil
}

// keepReply stores the reply of a command id. It has its own deadline: the
// request's may be spent by the command itself, and a claim left pending
// would make the next duplicate run the command again once it is taken
// over as abandoned.
func (s *service) keepReply(key string, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.kv.Put(ctx, key, body)
}

// release deletes the claim of a command id that was not applied.
func (s *service) release(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.kv.Delete(ctx, key)
}

// pendingPrefix marks a command id claimed by a service that is still
// executing it; the rest of the value is the claim's Unix time in ms.
const pendingPrefix = "pending:"

// abandonAfter is how old a claim may get before another service takes it
// over (its executor died).
const abandonAfter = 30 * time.Second

// claim returns the stored reply of a command id, or nil after claiming it
// for this execution. A command id being executed elsewhere is waited for
// (up to the request's context); a claim older than abandonAfter is taken
// over.
func (s *service) claim(ctx context.Context, key string) ([]byte, *weft.Error) {
	for {
		mark := []byte(pendingPrefix + strconv.FormatInt(time.Now().UnixMilli(), 10))
		if _, err := s.kv.Create(ctx, key, mark); err == nil {
			return nil, nil
		}
		e, err := s.kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // released meanwhile
			}
			return nil, &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
		}
		v := e.Value()
		if !bytes.HasPrefix(v, []byte(pendingPrefix)) {
			return v, nil
		}
		since, _ := strconv.ParseInt(string(v[len(pendingPrefix):]), 10, 64)
		if time.Since(time.UnixMilli(since)) > abandonAfter {
			if _, err := s.kv.Update(ctx, key, mark, e.Revision()); err == nil {
				return nil, nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, &weft.Error{Code: weft.CodeRunnerBusy, Message: "the same command id is still being applied; retry"}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// keep reports whether a refusal is definite (kept for the command id):
// neither retryable (weft.Code.Retryable: the same command id, sent again,
// is decided again) nor internal (a bug is not an answer to keep).
func keep(c weft.Code) bool {
	return !c.Retryable() && c != weft.CodeInternal
}

func respondError(r micro.Request, e *weft.Error) {
	body, _ := json.Marshal(ErrorReply{Schema: Schema, Error: e})
	respondErrorBody(r, e, body)
}

// respondErrorBody answers with the micro error path (so that the
// service's stats count the error): headers Nats-Service-Error (the weft
// code) and Nats-Service-Error-Code (the HTTP-like status), body the
// ErrorReply carrying the weft.Error.
func respondErrorBody(r micro.Request, e *weft.Error, body []byte) {
	_ = r.Error(strconv.Itoa(Status(e.Code)), string(e.Code), body)
}

// decode decodes a request strictly (unknown fields refused) and checks
// its schema.
func decode[T any](b []byte, schema func(*T) int) (T, error) {
	var v T
	dec := json.NewDecoder(bytesReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, &weft.Error{Code: weft.CodeInvalidRequest, Message: err.Error()}
	}
	if sc := schema(&v); sc != Schema {
		return v, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("schema must be %d, got %d", Schema, sc)}
	}
	return v, nil
}

func need(field, value string) error {
	if value == "" {
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: field + " is required"}
	}
	return nil
}

func (s *service) start(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *StartRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := bounded(field{"input", req.Input, MaxInput}, field{"correlation", req.Correlation, MaxID}); err != nil {
		return nil, "", err
	}
	if req.Run != "" {
		if err := checkRun(req.Run); err != nil {
			return nil, "", err
		}
	}
	if err := need("agent", req.Agent); err != nil {
		return nil, "", err
	}
	if !validToken(req.Agent, false) {
		return nil, "", &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("agent %q: a name is 1 to 64 characters of [A-Za-z0-9_-]", req.Agent)}
	}
	if req.Version != "" && !validToken(req.Version, true) {
		return nil, "", &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("version %q: a version is 1 to 64 characters of [A-Za-z0-9_.-]", req.Version)}
	}
	rep, err := s.b.Start(ctx, req)
	return rep, req.CommandID, err
}

func (s *service) approve(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *ApproveRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkApprove(req); err != nil {
		return nil, "", err
	}
	rep, err := s.b.Approve(ctx, req)
	return rep, req.CommandID, err
}

// checkApprove checks an approval's fields (their limits, the run id, the
// required ones), as the approve endpoint and an item of a batch decision
// take them.
func checkApprove(req ApproveRequest) error {
	if err := errors.Join(bounded(field{"action", req.Action, MaxID}, field{"approver", req.Approver, MaxID}, field{"credential", req.Credential, MaxCredential}), boundedProof(req.Proof)); err != nil {
		return firstCoded(err)
	}
	if err := checkRun(req.Run); err != nil {
		return err
	}
	if err := errors.Join(need("action", req.Action), need("approver", req.Approver), checkRevision(req.Revision)); err != nil {
		return firstCoded(err)
	}
	return nil
}

func (s *service) reject(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *RejectRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkReject(req); err != nil {
		return nil, "", err
	}
	rep, err := s.b.Reject(ctx, req)
	return rep, req.CommandID, err
}

// checkReject checks a rejection's fields, as the reject endpoint and an
// item of a batch decision take them.
func checkReject(req RejectRequest) error {
	if err := errors.Join(bounded(field{"action", req.Action, MaxID}, field{"approver", req.Approver, MaxID}, field{"credential", req.Credential, MaxCredential},
		field{"reason", req.Reason, MaxReason}, field{"by", req.By, MaxID}), boundedProof(req.Proof)); err != nil {
		return firstCoded(err)
	}
	if err := checkRun(req.Run); err != nil {
		return err
	}
	if err := errors.Join(need("action", req.Action), checkRevision(req.Revision)); err != nil {
		return firstCoded(err)
	}
	return nil
}

func (s *service) reconcile(ctx context.Context, b []byte, stored bool) (any, string, error) {
	req, err := decode(b, func(r *ReconcileRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := errors.Join(bounded(field{"action", req.Action, MaxID}, field{"by", req.By, MaxID}, field{"reason", req.Reason, MaxReason}), boundedProof(req.Proof)); err != nil {
		return nil, "", firstCoded(err)
	}
	if err := checkRun(req.Run); err != nil {
		return nil, "", err
	}
	if err := need("action", req.Action); err != nil {
		return nil, "", err
	}
	if len(req.Content) == 0 {
		return nil, "", &weft.Error{Code: weft.CodeInvalidContent, Message: "content is required"}
	}
	rep, err := s.b.Reconcile(ctx, req, stored)
	return rep, req.CommandID, err
}

func (s *service) resolve(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *ResolveRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := errors.Join(bounded(field{"action", req.Action, MaxID}, field{"by", req.By, MaxID}, field{"reason", req.Reason, MaxReason}), boundedProof(req.Proof)); err != nil {
		return nil, "", firstCoded(err)
	}
	if err := checkRun(req.Run); err != nil {
		return nil, "", err
	}
	if err := need("action", req.Action); err != nil {
		return nil, "", err
	}
	if len(req.Content) == 0 {
		return nil, "", &weft.Error{Code: weft.CodeInvalidContent, Message: "content is required"}
	}
	rep, err := s.b.Resolve(ctx, req)
	return rep, req.CommandID, err
}

func (s *service) settle(ctx context.Context, q *Queue, b []byte) (any, string, error) {
	req, err := decode(b, func(r *Settlement) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if req.Queue != nil || namesQueue(b) {
		return nil, "", errQueueInBody
	}
	req.Queue = q
	if err := bounded(field{"action", req.Action, MaxID}, field{"message", req.Message, MaxText}, field{"evidence", req.Evidence, MaxText}, field{"summary", req.Summary, MaxReason}); err != nil {
		return nil, "", err
	}
	if err := checkRun(req.Run); err != nil {
		return nil, "", err
	}
	if err := errors.Join(need("action", req.Action), need("outcome", req.Outcome)); err != nil {
		return nil, "", firstCoded(err)
	}
	rep, err := s.b.Settle(ctx, req)
	return rep, req.CommandID, err
}

func (s *service) cancel(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *CancelRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkPerson(req.Run, req.Reason, req.By, req.Proof); err != nil {
		return nil, "", err
	}
	rep, err := s.b.Cancel(ctx, req)
	return rep, req.CommandID, err
}

func (s *service) report(ctx context.Context, q *Queue, b []byte) (any, string, error) {
	req, err := decode(b, func(r *Report) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if req.Queue != nil || namesQueue(b) {
		return nil, "", errQueueInBody
	}
	req.Queue = q
	if err := bounded(field{"action", req.Action, MaxID}, field{"message", req.Message, MaxText}, field{"evidence", req.Evidence, MaxText},
		field{"cause", req.Cause, MaxID}, field{"worker", req.Worker, MaxID}); err != nil {
		return nil, "", err
	}
	if err := checkRun(req.Run); err != nil {
		return nil, "", err
	}
	if err := errors.Join(need("action", req.Action), need("outcome", req.Outcome)); err != nil {
		return nil, "", firstCoded(err)
	}
	rep, err := s.b.Report(ctx, req)
	return rep, req.CommandID, err
}

func firstCoded(err error) error {
	var we *weft.Error
	if errors.As(err, &we) {
		return we
	}
	return err
}

// validToken checks the grammar of agent names (1 to 64 of [A-Za-z0-9_-])
// and versions (which also allow '.'), as agent.New does.
func validToken(v string, dots bool) bool {
	if len(v) < 1 || len(v) > 64 {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.' && dots:
		default:
			return false
		}
	}
	return true
}
