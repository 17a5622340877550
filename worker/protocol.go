package worker

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
)

// The JetStream and NATS names of the task protocol
// (docs/protocol/41-tasks.md).
const (
	// TaskStream is the work-queue stream of tool tasks.
	TaskStream = "WEFT_TASKS"
	// TaskSubjectPrefix prefixes task subjects:
	// weft.task.<agent>.<version>.<tool> (see Queue).
	TaskSubjectPrefix = "weft.task."
	// ConsumerPrefix prefixes the durable consumer of a queue, shared by
	// all of its workers: weft_task_<agent>@<version>@<tool> (see Queue).
	ConsumerPrefix = "weft_task_"
	// ReportSubject is the request subject of a worker's report (an
	// endpoint of the weft micro service).
	ReportSubject = "weft.api.report"
	// SettleSubject is the request subject of a settlement.
	SettleSubject = "weft.api.settle"
	// StopSubjectPrefix prefixes the core subject on which runners ask
	// workers to stop a run's running bodies: weft.stop.<run>.
	StopSubjectPrefix = "weft.stop."
	// HeaderMsgID is the JetStream dedupe header set on every task:
	// <run>/<action>/<attempt>/<incarnation>.
	HeaderMsgID = "Nats-Msg-Id"
	// Schema is the schema version of task and report bodies.
	Schema = 1
)

// Queue names the tasks of one tool as bound in one agent identity: the
// tasks of runs of agent Agent at version Version that call Tool. A run
// of A@V only ever runs the body bound in A@V (SEMANTICS §3), even when
// other agents or versions served by the same processes bind a tool of
// the same name, so each (agent, version, tool) has its own subject and
// its own durable consumer (docs/adr/0008-tasks-addressed-by-agent-identity.md).
type Queue struct {
	// Agent is the agent's name, Version its version.
	Agent, Version string
	// Tool is the tool name.
	Tool string
}

// Subject is the subject of q's tasks:
// weft.task.<agent>.<version token>.<tool>, where the version token is
// the version with every '.' written '~' (VersionToken).
func (q Queue) Subject() string {
	return TaskSubjectPrefix + q.Agent + "." + VersionToken(q.Version) + "." + q.Tool
}

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

// QueueOf returns the queue named by the three subject tokens agent,
// version token and tool (the last three tokens of a task, report or
// settle subject).
func QueueOf(agent, versionToken, tool string) Queue {
	return Queue{Agent: agent, Version: strings.ReplaceAll(versionToken, "~", "."), Tool: tool}
}

// String is q as agent@version/tool, for logs and errors.
func (q Queue) String() string { return q.Agent + "@" + q.Version + "/" + q.Tool }

// VersionToken writes an agent version as one NATS subject token: every
// '.' (a token separator, allowed in versions) becomes '~' (never in a
// version), so distinct versions have distinct tokens: "2.0" is "2~0".
func VersionToken(version string) string { return strings.ReplaceAll(version, ".", "~") }

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
	// the rest of the run (LogCheck). Absent: read the run.
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

// The outcomes of a Report. The first four are AttemptReported outcomes;
// OutcomeLost reports an attempt that ended without a result of its own.
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

// Report is the body a worker sends to weft.api.report when an attempt
// ended: api.Report, the wire type (this alias keeps worker's callers
// compiling). A worker retries until it gets a reply, and acks the task
// only then.
type Report = api.Report

// Settlement is the body of a settlement on weft.api.settle: api.Settlement,
// the wire type.
type Settlement = api.Settlement
