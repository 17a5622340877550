package api

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Schema is the schema version of every request and reply body.
const Schema = 1

// Subject prefixes and the endpoints of the "weft" micro service.
const (
	// ServiceName is the NATS micro service name ("nats micro ls").
	ServiceName = "weft"
	// SubjectPrefix prefixes every endpoint: weft.api.<endpoint>.
	SubjectPrefix = "weft.api."

	// EndpointStart starts a run.
	EndpointStart = "start"
	// EndpointApprove approves a pending approval request.
	EndpointApprove = "approve"
	// EndpointReject rejects a pending approval request.
	EndpointReject = "reject"
	// EndpointReconcile reconciles an uncertain action of a live run.
	EndpointReconcile = "reconcile"
	// EndpointReconcileStored reconciles an uncertain action of a finished run.
	EndpointReconcileStored = "reconcile_stored"
	// EndpointSettle offers a settling tool's settlement.
	EndpointSettle = "settle"
	// EndpointCancel cancels a run.
	EndpointCancel = "cancel"
	// EndpointReport is a tool worker's report of an attempt.
	EndpointReport = "report"
	// EndpointResolve records the final truth of an open question (an
	// action reconciled as unconfirmed), for audit.
	EndpointResolve = "resolve"
	// EndpointReportQueue is a tool worker's report on its queue's
	// subject, weft.api.report.<agent>.<version token>.<tool>
	// (Queue.ReportSubject): the runner refuses it for an action
	// of another queue (wrong_reference, reason other_queue).
	EndpointReportQueue = "report_queue"
	// EndpointSettleQueue is a settlement on the settled action's queue's
	// subject, weft.api.settle.<agent>.<version token>.<tool>, checked as
	// EndpointReportQueue.
	EndpointSettleQueue = "settle_queue"
)

// ReasonOtherQueue is the Reason of the wrong_reference refusal of a
// report or settlement received on a queue's subject for an action that is
// not a call of that queue's tool in a run of that queue's agent identity.
const ReasonOtherQueue = "other_queue"

// MaxBody is the largest request body accepted (bytes): 2 MiB, room for a
// worker's report of a result of the default max result bytes (1 MiB,
// docs/semantics.md §2) with its envelope. The NATS server must allow messages
// of
// this size and more (weft's embedded server and nats.conf allow 8 MiB,
// protocol.MaxPayload; docs/protocol/10-log.md).
const MaxBody = 2 << 20

// StartRequest starts a run of an agent.
type StartRequest struct {
	Schema int `json:"schema"`
	// CommandID makes the command idempotent: a repeated command id gets
	// the first reply. Optional for start (the run id already is one).
	CommandID string `json:"command_id,omitempty"`
	// Run is the caller-chosen run id (1–128 of [A-Za-z0-9_-]); empty to
	// have one generated.
	Run string `json:"run,omitempty"`
	// Agent is the agent name; Version its version (empty: the version the
	// runners serve).
	Agent   string `json:"agent"`
	Version string `json:"version,omitempty"`
	// Input is the run's input text.
	Input string `json:"input"`
	// Correlation is the caller's correlation id (tracing only).
	Correlation string `json:"correlation,omitempty"`
}

// StartReply answers a start.
type StartReply struct {
	Schema int    `json:"schema"`
	Run    string `json:"run"`
	// Status is the run's status right after the start ("working").
	Status string `json:"status"`
}

// ApproveRequest approves a pending approval request with a credential the
// named approver verifies.
type ApproveRequest struct {
	Schema     int    `json:"schema"`
	CommandID  string `json:"command_id"`
	Run        string `json:"run"`
	Action     string `json:"action"`
	Revision   int    `json:"revision"`
	Approver   string `json:"approver"`
	Credential string `json:"credential"`
	// Proof is a signed approval proof, for an approver of signed proofs
	// (approvers.Signed; docs/protocol/20-events.md): then Credential is
	// not used.
	Proof *events.ApprovalProof `json:"proof,omitempty"`
	// Arguments, when set, approve the call narrowed to these edited
	// arguments instead of the model's (docs/semantics.md §4, "Approving
	// narrower arguments"): they must decode with the tool's input codec
	// (else invalid_content), the policy is re-run with them and the
	// approver's context (a decision other than allow or the requirement
	// being answered: edit_refused), a signed proof must state their hash
	// (events.ApprovalProof.Approved), and the body gets them. Absent,
	// empty and null are no edit (EditedArguments).
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// EditedArguments are the edited arguments an approve's (or a decide
// item's) arguments field carries: nil, no edit, when it is absent, empty
// or JSON null — a client that sends "arguments": null approves the call
// as asked, never one with empty arguments (docs/semantics.md §4,
// "Approving narrower arguments").
func EditedArguments(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil
	}
	return raw
}

// RejectRequest rejects a pending approval request. The credential is
// verified like an approval's (the reviewer is recorded as By).
type RejectRequest struct {
	Schema     int    `json:"schema"`
	CommandID  string `json:"command_id"`
	Run        string `json:"run"`
	Action     string `json:"action"`
	Revision   int    `json:"revision"`
	Reason     string `json:"reason"`
	Approver   string `json:"approver,omitempty"`
	Credential string `json:"credential,omitempty"`
	By         string `json:"by,omitempty"`
	// Proof is a signed proof of the rejection (its answer "reject"), as
	// for ApproveRequest.
	Proof *events.ApprovalProof `json:"proof,omitempty"`
}

// ReconcileRequest records what happened to an uncertain action (reconcile
// on a live run, reconcile_stored on a finished one). Content is the tool's
// encoded output, {"error": message} or {"unconfirmed": note}.
type ReconcileRequest struct {
	Schema    int             `json:"schema"`
	CommandID string          `json:"command_id"`
	Run       string          `json:"run"`
	Action    string          `json:"action"`
	Content   json.RawMessage `json:"content"`
	By        string          `json:"by,omitempty"`
	// Reason is why the person records it (required when the deployment
	// requires identities, docs/security.md "Who did it").
	Reason string `json:"reason,omitempty"`
	// Proof is a signed command proof (package proof, "Signed command
	// proofs" in docs/protocol/20-events.md) by one of the deployment's
	// person keys: the command is then recorded as made by the key's
	// person, verified, and By is not used.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

// ResolveRequest records the final truth of an open question: an action
// reconciled as unconfirmed. Content is the tool's encoded output (the
// effect happened) or {"error": message} (it did not). Nothing resumes and
// the run does not change: it is recorded for audit (events.Resolved) and
// the question leaves the open-questions read model.
type ResolveRequest struct {
	Schema    int             `json:"schema"`
	CommandID string          `json:"command_id"`
	Run       string          `json:"run"`
	Action    string          `json:"action"`
	Content   json.RawMessage `json:"content"`
	By        string          `json:"by,omitempty"`
	// Reason and Proof are as for ReconcileRequest.
	Reason string               `json:"reason,omitempty"`
	Proof  *events.CommandProof `json:"proof,omitempty"`
}

// Report is the body a tool worker sends to weft.api.report when an
// attempt ended (docs/protocol/41-tasks.md). The reply is the command API's
// Reply or an error reply.
type Report struct {
	// Schema is 1.
	Schema int `json:"schema"`
	// CommandID makes the report idempotent; workers use
	// "report/<run>/<action>/<attempt>/<incarnation>".
	CommandID string `json:"command_id,omitempty"`
	// Run, Action, Attempt and Incarnation echo the task.
	Run         string `json:"run"`
	Action      string `json:"action"`
	Attempt     int    `json:"attempt"`
	Incarnation int    `json:"incarnation"`
	// Outcome is output (Content), explain (Message), uncertain
	// (Evidence), oversize (Bytes) or lost (Cause).
	Outcome string `json:"outcome"`
	// Content is the encoded output (output).
	Content json.RawMessage `json:"content,omitempty"`
	// Message is the definite failure the model sees (explain).
	Message string `json:"message,omitempty"`
	// Evidence says what happened (uncertain, lost).
	Evidence string `json:"evidence,omitempty"`
	// Bytes is the size of an oversize output.
	Bytes int64 `json:"bytes,omitempty"`
	// Cause is why an attempt was lost: timed_out, crashed, worker_lost,
	// stopped, or not_started (the worker marked its claim not started:
	// CauseNotStarted).
	Cause string `json:"cause,omitempty"`
	// Worker identifies the reporting worker, for audit.
	Worker string `json:"worker,omitempty"`
	// Queue is the tool queue the report is for. A worker sets it to
	// report on the queue's subject,
	// weft.api.report.<agent>.<version token>.<tool>, instead of
	// weft.api.report; on the wire it is the subject, never a body field
	// (the command API refuses a body naming it and sets it from the
	// subject).
	Queue *Queue `json:"queue,omitempty"`
}

// Queue names a tool queue: the tasks of one tool as bound in one agent
// identity (docs/adr/0008). Its methods name its subjects
// (Subject, Consumer, ReportSubject, SettleSubject).
type Queue struct {
	// Agent is the agent's name, Version its version.
	Agent, Version string
	// Tool is the tool name.
	Tool string
}

// Settlement is the body of a settlement on weft.api.settle: a settling
// tool's result, offered by its body or whatever it handed the work to.
type Settlement struct {
	// Schema is 1.
	Schema int `json:"schema"`
	// CommandID makes the settlement idempotent.
	CommandID string `json:"command_id,omitempty"`
	// Run and Action identify the settled action.
	Run    string `json:"run"`
	Action string `json:"action"`
	// Outcome is output (Content), explain (Message) or uncertain
	// (Evidence).
	Outcome  string          `json:"outcome"`
	Content  json.RawMessage `json:"content,omitempty"`
	Message  string          `json:"message,omitempty"`
	Evidence string          `json:"evidence,omitempty"`
	// Summary is what a person needs to reconcile the action if the
	// settlement is refused; it goes to telemetry (settlement_refused), so
	// it must carry no secrets.
	Summary string `json:"summary,omitempty"`
	// Queue is the queue of the settled action, as for Report: the
	// settlement goes to weft.api.settle.<agent>.<version token>.<tool>
	// when set.
	Queue *Queue `json:"queue,omitempty"`
}

// CancelRequest cancels a run.
type CancelRequest struct {
	Schema    int    `json:"schema"`
	CommandID string `json:"command_id"`
	Run       string `json:"run"`
	Reason    string `json:"reason,omitempty"`
	By        string `json:"by,omitempty"`
	// Proof is a signed command proof, as for ReconcileRequest.
	Proof *events.CommandProof `json:"proof,omitempty"`
}

// Reply is the reply of every command but start: the run's status after
// the command was applied.
type Reply struct {
	Schema int    `json:"schema"`
	Run    string `json:"run,omitempty"`
	Status string `json:"status,omitempty"`
}

// ErrorReply is the body of every error reply of every Weft service — the
// command API, the queries (weft.api.query.*) and the catalog
// (weft.catalog.*): the one error envelope (docs/adr/0034). The micro
// service also sets the Nats-Service-Error-Code header (the HTTP-like
// status of Code) and Nats-Service-Error (the code). ReplyError reads it.
type ErrorReply struct {
	Schema int         `json:"schema"`
	Error  *weft.Error `json:"error"`
}

// Status returns the HTTP-like status sent for the protocol error code c
// in the Nats-Service-Error-Code header, 500 for a code it does not know.
// Its table is the one table of the wire mapping.
func Status(c weft.Code) int {
	if st, ok := statuses[c]; ok {
		return st
	}
	return 500
}

// statuses maps every protocol error code to its HTTP-like status
// (Status).
var statuses = map[weft.Code]int{
	weft.CodeInvalidJSON:       400,
	weft.CodeInvalidRequest:    400,
	weft.CodePayloadTooLarge:   413,
	weft.CodeInvalidName:       400,
	weft.CodeUnknownRun:        404,
	weft.CodeUnknownAgent:      404,
	weft.CodeUnknownTool:       404,
	weft.CodeBadFilter:         400,
	weft.CodeBadCursor:         400,
	weft.CodeAlreadyStarted:    409,
	weft.CodeKeyReused:         409,
	weft.CodeWrongReference:    404,
	weft.CodeStaleReference:    409,
	weft.CodeAlreadyAnswered:   409,
	weft.CodeApprovalExpired:   410,
	weft.CodeRunEnded:          409,
	weft.CodeProofRefused:      403,
	weft.CodeEditRefused:       403,
	weft.CodeNotReconcilable:   409,
	weft.CodeAlreadyRecorded:   409,
	weft.CodeNotAwaited:        409,
	weft.CodeSettleUnconfirmed: 503,
	weft.CodeOutcomeUnknown:    504,
	weft.CodeInvalidContent:    400,
	weft.CodeRunActive:         409,
	weft.CodeRunNotEnded:       409,
	weft.CodeNotResolvable:     409,
	weft.CodeAlreadyResolved:   409,
	weft.CodeRunNotFinished:    409,
	weft.CodeUncertainActions:  409,
	weft.CodePermissionDenied:  403,
	weft.CodeIdentityRequired:  403,
	weft.CodeQuarantined:       409,
	weft.CodeRunnerBusy:        503,
	weft.CodeContended:         503,
	weft.CodeConflict:          409,
	weft.CodeUnavailable:       503,
	weft.CodeInternal:          500,
}

// Refusals returns, for every endpoint of the "weft" service, the error
// codes it may answer, in the order of docs/protocol.md's error table. It
// is the source of that table's "sent by" column (a test keeps the two
// equal, and checks that every code the command side's packages can send
// is listed for some endpoint). The map and its slices are a fresh copy on
// every call: a caller that changes them changes nothing else.
func Refusals() map[string][]weft.Code {
	out := make(map[string][]weft.Code, len(refusals))
	for e, codes := range refusals {
		out[e] = slices.Clone(codes)
	}
	return out
}

// refusals is the table Refusals copies.
var refusals = map[string][]weft.Code{
	EndpointStart:           commandRefusals(weft.CodeAlreadyStarted, weft.CodeOutcomeUnknown),
	EndpointApprove:         runRefusals(weft.CodeWrongReference, weft.CodeStaleReference, weft.CodeAlreadyAnswered, weft.CodeApprovalExpired, weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired, weft.CodeInvalidContent, weft.CodeEditRefused),
	EndpointReject:          runRefusals(weft.CodeWrongReference, weft.CodeStaleReference, weft.CodeAlreadyAnswered, weft.CodeApprovalExpired, weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointReconcile:       runRefusals(weft.CodeWrongReference, weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeNotReconcilable, weft.CodeInvalidContent, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointReconcileStored: runRefusals(weft.CodeWrongReference, weft.CodeProofRefused, weft.CodeNotReconcilable, weft.CodeInvalidContent, weft.CodeRunActive, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointSettle:          runRefusals(weft.CodeWrongReference, weft.CodeAlreadyRecorded, weft.CodeNotAwaited, weft.CodeSettleUnconfirmed, weft.CodeInvalidContent),
	EndpointCancel:          runRefusals(weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointPause:           runRefusals(weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointResume:          runRefusals(weft.CodeRunEnded, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointRestart:         runRefusals(weft.CodeAlreadyStarted, weft.CodeRunNotFinished, weft.CodeWrongReference, weft.CodeUncertainActions, weft.CodeProofRefused, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	EndpointReport:          runRefusals(weft.CodeWrongReference, weft.CodeRunEnded),
	EndpointResolve:         runRefusals(weft.CodeWrongReference, weft.CodeProofRefused, weft.CodeInvalidContent, weft.CodeNotResolvable, weft.CodeAlreadyResolved, weft.CodeOutcomeUnknown, weft.CodeIdentityRequired),
	// A batch's own refusals; each item's outcome may carry any of
	// approve's and reject's (DecideOutcome.Error).
	EndpointDecide: commandRefusals(),
	// Legal holds (retention.Place, retention.ReleaseHold): conflict when
	// a purge passed its hold check on the run; who placed or released
	// it as for a cancel (docs/security.md, "Who did it").
	EndpointHold:        runRefusals(weft.CodeProofRefused, weft.CodeIdentityRequired),
	EndpointReleaseHold: runRefusals(weft.CodeProofRefused, weft.CodeIdentityRequired),
}

// commandRefusals is what every command endpoint may answer (decoding,
// idempotency, routing, the store), plus extra.
func commandRefusals(extra ...weft.Code) []weft.Code {
	return append([]weft.Code{
		weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeInvalidName, weft.CodeUnknownAgent,
		weft.CodeQuarantined, weft.CodeRunnerBusy, weft.CodeContended, weft.CodeConflict, weft.CodeUnavailable, weft.CodeInternal,
	}, extra...)
}

// runRefusals is what every command on an existing run may answer, plus
// extra.
func runRefusals(extra ...weft.Code) []weft.Code {
	return commandRefusals(append([]weft.Code{weft.CodeUnknownRun}, extra...)...)
}
