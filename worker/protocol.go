package worker

import "github.com/weftrun/weft/api"

// The JetStream and NATS names of the task protocol
// (docs/protocol/41-tasks.md), defined in package api with the wire types:
// a worker written without this package needs api alone.
const (
	// TaskStream is api.TaskStream, the work-queue stream of tool tasks.
	TaskStream = api.TaskStream
	// TaskSubjectPrefix is api.TaskSubjectPrefix:
	// weft.task.<agent>.<version>.<tool> (see Queue).
	TaskSubjectPrefix = api.TaskSubjectPrefix
	// ConsumerPrefix is api.ConsumerPrefix, the prefix of a queue's durable
	// consumer (see Queue).
	ConsumerPrefix = api.ConsumerPrefix
	// ReportSubject is api.ReportSubject, the request subject of a
	// worker's report without a queue.
	ReportSubject = api.ReportSubject
	// SettleSubject is api.SettleSubject, the request subject of a
	// settlement without a queue.
	SettleSubject = api.SettleSubject
	// StopSubjectPrefix is api.StopSubjectPrefix: weft.stop.<run>.
	StopSubjectPrefix = api.StopSubjectPrefix
	// HeaderMsgID is api.HeaderMsgID, the JetStream dedupe header set on
	// every task.
	HeaderMsgID = api.HeaderMsgID
	// Schema is the schema version of task and report bodies.
	Schema = api.Schema
)

// Queue names the tasks of one tool as bound in one agent identity: the
// tasks of runs of agent Agent at version Version that call Tool. A run
// of A@V only ever runs the body bound in A@V (docs/semantics.md §3), even when
// other agents or versions served by the same processes bind a tool of
// the same name, so each (agent, version, tool) has its own subject and
// its own durable consumer (docs/adr/0008-tasks-addressed-by-agent-identity.md).
// It is api.Queue, which names the subjects.
type Queue = api.Queue

// QueueOf is api.QueueOf: the queue named by the three subject tokens
// agent, version token and tool.
func QueueOf(agent, versionToken, tool string) Queue { return api.QueueOf(agent, versionToken, tool) }

// VersionToken is api.VersionToken: an agent version written as one NATS
// subject token ("2.0" is "2~0").
func VersionToken(version string) string { return api.VersionToken(version) }

// Task is the body of a tool task on its Queue's subject: api.Task, the
// wire type (this alias keeps worker's callers compiling).
type Task = api.Task

// The outcomes of a Report: api's (api.OutcomeOutput, …).
const (
	// OutcomeOutput means the body returned an output (Content).
	OutcomeOutput = api.OutcomeOutput
	// OutcomeExplain means a definite failure the model sees (Message).
	OutcomeExplain = api.OutcomeExplain
	// OutcomeUncertain means the effect may have happened (Evidence).
	OutcomeUncertain = api.OutcomeUncertain
	// OutcomeOversize means the encoded output was over max result bytes (Bytes).
	OutcomeOversize = api.OutcomeOversize
	// OutcomeLost means the attempt ended without a result of its own (Cause).
	OutcomeLost = api.OutcomeLost
)

// Report is the body a worker sends to weft.api.report when an attempt
// ended: api.Report, the wire type (this alias keeps worker's callers
// compiling). A worker retries until it gets a reply, and acks the task
// only then.
type Report = api.Report

// Settlement is the body of a settlement on weft.api.settle: api.Settlement,
// the wire type.
type Settlement = api.Settlement
