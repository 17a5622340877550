package api

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/protocol"
)

// The JetStream and NATS names of the task protocol
// (docs/protocol/41-tasks.md): what a worker in any language takes tasks
// from, reports and settles on. Package worker is the Go worker; a client
// that speaks the protocol itself needs only this package.
const (
	// TaskStream is the work-queue stream of tool tasks.
	TaskStream = protocol.TasksStream
	// TaskSubjectPrefix prefixes task subjects:
	// weft.task.<agent>.<version token>.<tool> (Queue.Subject).
	TaskSubjectPrefix = "weft.task."
	// ConsumerPrefix prefixes the durable consumer of a queue, shared by
	// all of its workers: weft_task_<agent>@<version token>@<tool>
	// (Queue.Consumer).
	ConsumerPrefix = protocol.TaskConsumerPrefix
	// ReportSubject is the request subject of a worker's report without a
	// queue (endpoint EndpointReport); Queue.ReportSubject is a queue's.
	ReportSubject = SubjectPrefix + EndpointReport
	// SettleSubject is the request subject of a settlement without a
	// queue (endpoint EndpointSettle); Queue.SettleSubject is a queue's.
	SettleSubject = SubjectPrefix + EndpointSettle
	// StopSubjectPrefix prefixes the core subject on which runners ask
	// workers to stop a run's running bodies: weft.stop.<run>.
	StopSubjectPrefix = "weft.stop."
	// HeaderMsgID is the JetStream dedupe header set on every task:
	// <run>/<action>/<attempt>/<incarnation>.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderUnstartedClaim is set on a requeued task (rule 9 of the task
	// protocol): the tokens of claims that deliveries of the task
	// took, or may have taken without an answer, and started no body
	// under: a worker that finds the attempt's claim holding one of them
	// takes it over (an update guarded by its revision, with its own token)
	// instead of reporting the attempt lost.
	HeaderUnstartedClaim = "Weft-Unstarted-Claim"
	// ClaimsBucket is the KV bucket of attempt claims: a worker creates
	// the attempt's key (Task.Claim, ClaimKey), create-only, before it
	// starts the body.
	ClaimsBucket = protocol.ClaimsBucket
	// RunnersBucket is the KV bucket of live runners
	// (docs/protocol/40-commands.md): a key per live runner id. A worker
	// reads it to know whether the runner that handed a run off still
	// lives (rule 2 of the task protocol).
	RunnersBucket = protocol.RunnersBucket
)

// The outcomes of a Report. The first four are those of an attempt
// reported with a result; OutcomeLost reports an attempt that ended
// without a result of its own (Report.Cause).
const (
	// OutcomeOutput means the body returned an output (Content).
	OutcomeOutput = events.OutcomeOutput
	// OutcomeExplain means a definite failure the model sees (Message).
	OutcomeExplain = events.OutcomeExplain
	// OutcomeUncertain means the effect may have happened (Evidence).
	OutcomeUncertain = events.OutcomeUncertain
	// OutcomeOversize means the encoded output was over max result bytes (Bytes).
	OutcomeOversize = events.OutcomeOversize
	// OutcomeLost means the attempt ended without a result of its own (Cause).
	OutcomeLost = "lost"
)

// The causes of a lost Report (docs/protocol/41-tasks.md, "What a lost
// report does").
const (
	// CauseTimedOut is a body still running at its deadline, or a task
	// that reached a worker after it.
	CauseTimedOut = events.CauseTimedOut
	// CauseCrashed is a body that crashed.
	CauseCrashed = events.CauseCrashed
	// CauseWorkerLost is an attempt claimed before by a worker that
	// vanished (its body may have run), or abandoned at the end of its
	// worker's drain window.
	CauseWorkerLost = events.CauseWorkerLost
	// CauseStopped is a body stopped by its run's stop (weft.stop.<run>).
	CauseStopped = events.CauseStopped
	// CauseNotStarted is an attempt whose claim its worker marked not
	// started (Claim.NotStarted) for a reason other than the deadline:
	// the run reads the claim and records the mark if a decision read the
	// claim before it (docs/adr/0023-closing-attempts.md, "Late evidence:
	// a mark after the decision"). The report alone records nothing.
	CauseNotStarted = "not_started"
)

// Task is the body of a tool task on its Queue's subject: one fenced
// attempt of one action. Its fence is committed before the task is
// published.
type Task struct {
	// Schema is 1.
	Schema int `json:"schema"`
	// Run and Action identify the action ("<turn>/<call_id>").
	Run    string `json:"run"`
	Action string `json:"action"`
	// Agent and Version are the run's agent identity, whose binding of
	// Tool runs the body.
	Agent   string `json:"agent"`
	Version string `json:"version"`
	// Tool is the tool name.
	Tool string `json:"tool"`
	// Attempt is the 1-based attempt; Incarnation the run's incarnation
	// that fenced it. Both must be echoed in the report.
	Attempt     int `json:"attempt"`
	Incarnation int `json:"incarnation"`
	// Claim is the attempt's key in the KV bucket weft_claims (ClaimKey),
	// which a worker creates, create-only, before it starts the body.
	Claim string `json:"claim,omitempty"`
	// FenceVersion is the run version of the attempt's attempt_fenced
	// event, when the runner knows it: a worker that finds that event in
	// the run's last message knows the attempt is current without reading
	// the rest of the run (worker.LogCheck). Absent: read the run.
	FenceVersion uint64 `json:"fence_version,omitempty"`
	// Arguments are the validated, normalized arguments.
	Arguments json.RawMessage `json:"arguments"`
	// TimeoutMS bounds the body; -1 is infinity.
	TimeoutMS int64 `json:"timeout_ms"`
	// Deadline is the absolute deadline of the body, absent for infinity.
	Deadline *time.Time `json:"deadline,omitempty"`
	// MaxResultBytes is the run's max result bytes: a larger encoded
	// output is reported as outcome "oversize".
	MaxResultBytes int64 `json:"max_result_bytes"`
	// SettleWithinMS is the settle window of a settling tool, 0 otherwise.
	SettleWithinMS int64 `json:"settle_within_ms,omitempty"`
	// IdempotencyKey is stable for the logical action across attempts.
	IdempotencyKey string `json:"idempotency_key"`
	// Correlation is the run's correlation id.
	Correlation string `json:"correlation,omitempty"`
	// Reviewer is the approver whose context the body runs with, if any.
	Reviewer string `json:"reviewer,omitempty"`
}

// Claim is the value the Go worker stores under an attempt's claim key.
// Other workers may store any value: a key that exists is a claim,
// whatever it holds; a worker that finds a Report in it delivers that
// report instead of reporting the attempt lost (rules 3 and 6 of the task
// protocol).
type Claim struct {
	// Schema is 1.
	Schema int `json:"schema"`
	// Worker is the id of the worker that claimed the attempt.
	Worker string `json:"worker"`
	// Token is unique to the delivery that claimed it: a worker whose
	// create timed out and finds the key with its own token holds it.
	Token string `json:"token"`
	// Claimed is when the worker claimed it, by its clock.
	Claimed time.Time `json:"claimed"`
	// Report is the attempt's report, saved by the worker that ran the
	// body when delivering it failed: a later delivery of the task
	// delivers it instead of reporting the attempt lost.
	Report *Report `json:"report,omitempty"`
	// Closed is set on a claim the runtime created to close the attempt
	// before any worker claimed it (docs/adr/0023-closing-attempts.md): no
	// body ever starts under it, and a delivery that finds it acks the
	// task without starting the body and without reporting.
	Closed *ClaimClose `json:"closed,omitempty"`
	// NotStarted is set by the worker that holds the claim when it
	// decides not to start the body after all (its check after the claim
	// found the attempt no longer current, its run's stop came, or the
	// deadline passed): an update of its own claim at the revision it
	// created, after which that worker never starts the body. No body
	// ever starts under it: a delivery that finds it acks the task without
	// starting the body, after delivering the claim's saved Report if it
	// holds one (docs/protocol/41-tasks.md rule 6) or else reporting the
	// mark (a lost report with cause not_started, "Reporting the mark");
	// it is never taken over (api.HeaderUnstartedClaim), and the runtime's
	// close counts it as closed (docs/adr/0023-closing-attempts.md, "Claims
	// released as not started"). The update drops the claim's per-key TTL:
	// a marked claim lives for the bucket's max age.
	NotStarted *ClaimNotStarted `json:"not_started,omitempty"`
}

// ClaimNotStarted says why the worker that claimed an attempt (Claim.Worker)
// never started its body, and when it decided so.
type ClaimNotStarted struct {
	// Why is ClaimEnded, ClaimStopped or ClaimDeadline.
	Why string `json:"why"`
	// At is when the worker wrote it, by its clock.
	At time.Time `json:"at"`
}

// The reasons of ClaimNotStarted.
const (
	// ClaimEnded is the reason when the worker's check after the claim
	// found the attempt no longer current (ended, replaced, or its run handed off by a runner
	// that is gone).
	ClaimEnded = "ended"
	// ClaimStopped is the reason when a stop of the attempt's run reached
	// the worker before the body started.
	ClaimStopped = "stopped"
	// ClaimDeadline is the reason when the attempt's deadline passed
	// before the body started.
	ClaimDeadline = "deadline"
)

// ClaimClose says who closed an attempt's claim before any worker took it,
// and why.
type ClaimClose struct {
	// By is the id of the runner that closed it.
	By string `json:"by"`
	// Why is the path that ended or abandoned the attempt: cancelled,
	// run_ended, timed_out, runner_lost, handed_off, reasked.
	Why string `json:"why"`
	// At is when it was closed, by the runner's clock.
	At time.Time `json:"at"`
}

// ClaimKey is the key of an attempt's claim in ClaimsBucket:
// <run>.<action>.<attempt>.<incarnation>, the action ("<turn>/<call_id>",
// whose call id the model chose) written in unpadded base64url so that the
// key is a valid KV key and distinct attempts have distinct keys.
func ClaimKey(run, action string, attempt, incarnation int) string {
	return run + "." + base64.RawURLEncoding.EncodeToString([]byte(action)) + "." + strconv.Itoa(attempt) + "." + strconv.Itoa(incarnation)
}

// Subject is the subject of q's tasks:
// weft.task.<agent>.<version token>.<tool>, where the version token is
// the version with every '.' written '~' (VersionToken).
func (q Queue) Subject() string { return TaskSubjectPrefix + q.tokens() }

// Consumer is the durable consumer shared by q's workers:
// weft_task_<agent>@<version token>@<tool>. Agent names, version tokens and
// tool names never contain '@', so distinct queues have distinct names.
func (q Queue) Consumer() string {
	return ConsumerPrefix + q.Agent + "@" + VersionToken(q.Version) + "@" + q.Tool
}

// ReportSubject is the subject on which q's workers report attempts:
// weft.api.report.<agent>.<version token>.<tool>. The runner refuses a
// report received there for an action that is not a call of q's tool in a
// run of q's agent identity (wrong_reference, reason other_queue), so a
// worker allowed to publish only on its queue's subjects (package roles)
// reports for its own tool only.
func (q Queue) ReportSubject() string { return ReportSubject + "." + q.tokens() }

// SettleSubject is the subject on which q's workers settle actions:
// weft.api.settle.<agent>.<version token>.<tool>, checked like
// ReportSubject.
func (q Queue) SettleSubject() string { return SettleSubject + "." + q.tokens() }

func (q Queue) tokens() string { return q.Agent + "." + VersionToken(q.Version) + "." + q.Tool }

// String is q as agent@version/tool, for logs and errors.
func (q Queue) String() string { return q.Agent + "@" + q.Version + "/" + q.Tool }

// QueueOf returns the queue named by the three subject tokens agent,
// version token and tool (the last three tokens of a task, report or
// settle subject).
func QueueOf(agent, versionToken, tool string) Queue {
	return Queue{Agent: agent, Version: strings.ReplaceAll(versionToken, "~", "."), Tool: tool}
}

// VersionToken writes an agent version as one NATS subject token: every
// '.' (a token separator, allowed in versions) becomes '~' (never in a
// version), so distinct versions have distinct tokens: "2.0" is "2~0".
func VersionToken(version string) string { return strings.ReplaceAll(version, ".", "~") }
