// Package roles is Weft's least privilege on the wire: the NATS
// permissions of each role that talks to a Weft deployment, and an
// Authority that issues each role its credentials.
//
// The roles (docs/security.md):
//
//   - Runner appends to the event log (weft.ev.>), serves the command API
//     (weft.api.*, not the queries), publishes tool tasks, arms timers and
//     owns its KV buckets (weft_runners, weft_drivers, weft_partitions,
//     weft_commands, weft_snapshots). Its in-process worker runs with the same grant.
//   - Worker serves one tool queue (api.Queue: a tool as bound in one
//     agent identity): it takes tasks only through that queue's consumer,
//     reports and settles only on that queue's subjects
//     (weft.api.report.<agent>.<version>.<tool>, weft.api.settle.…), reads
//     the log to check that an attempt is current, and never publishes on
//     weft.ev.>.
//   - Projector reads the log and writes the read-model buckets (weft_views,
//     weft_runs, weft_inbox_*, weft_open_questions, weft_index,
//     weft_projector, weft_projector_lease; it may purge keys of
//     weft_index — the purge API takes no subject filter in its subject,
//     so the grant allows purging the whole bucket too: docs/security.md);
//     it serves the queries.
//   - Operator answers approvals, rejects, reconciles, cancels and starts
//     runs, and reads everything a Reader reads.
//   - Reader asks the queries and reads the history and the read models;
//     it changes nothing.
//   - Custodian keeps the records: it places and releases legal holds
//     (weft.api.hold, weft.api.release_hold) and applies retention
//     (retention.Apply: it purges finished runs from the log, the read
//     models and the runtime's buckets), and reads what a Reader reads.
//     It answers no approval, starts nothing, takes no task and puts no
//     value but in weft_holds and weft_purges; the purge API takes no
//     subject filter in its subject, so it may purge any run, live ones
//     included (docs/security.md).
//
// Every role subscribes to replies only under its own inbox prefix
// (_INBOX.<role>, _INBOX.worker.<agent>.<version>.<tool> for a worker), so
// no role reads another's replies (a worker's tasks are delivered to its
// inbox), and no role may publish on _INBOX.>: a service answers only the
// requests it received (response permissions), so nobody can forge a
// JetStream acknowledgement or another service's reply.
//
// The permissions are decentralised NATS JWTs (docs/adr/0013): an operator
// key signs the WEFT account, whose key signs one user JWT per role;
// Authority keeps the keys in a directory, writes the server's
// auth.conf (operator, system account, memory resolver) and issues
// .creds files, so a new worker queue needs new credentials and no change
// to the server.
package roles

import (
	"fmt"
	"strings"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/timer"
)

// Role is one of the roles of a Weft deployment.
type Role string

// The roles.
const (
	// Runner runs agents: it appends to the log and serves the commands.
	Runner Role = "runner"
	// Worker runs one tool queue's bodies.
	Worker Role = "worker"
	// Projector keeps the read models and serves the queries.
	Projector Role = "projector"
	// Operator answers approvals, reconciles, cancels and starts runs.
	Operator Role = "operator"
	// Reader reads: queries, history and read models.
	Reader Role = "reader"
	// Custodian places legal holds and applies retention.
	Custodian Role = "custodian"
)

// All returns the roles, a fresh slice on each call.
func All() []Role { return []Role{Runner, Worker, Projector, Operator, Reader, Custodian} }

// Parse returns the role called name.
func Parse(name string) (Role, error) {
	for _, r := range All() {
		if string(r) == name {
			return r, nil
		}
	}
	return "", fmt.Errorf("roles: unknown role %q (one of runner, worker, projector, operator, reader, custodian)", name)
}

// Grant is what a role may do on the wire: the subjects it may publish and
// subscribe to (NATS wildcards), whether it may answer the requests it
// receives, and the inbox prefix its replies arrive under.
type Grant struct {
	// Name names the grant's holder: the role, or worker.<queue> for a
	// worker.
	Name string
	// Publish and Subscribe are the allowed subjects; anything else is
	// refused by the server.
	Publish, Subscribe []string
	// Responses allows answering, once, a request received (the reply
	// subject of a message delivered to this user), without any publish
	// permission on _INBOX.>.
	Responses bool
	// InboxPrefix is the prefix of the holder's reply subjects, to set as
	// its connection's custom inbox prefix (nats.CustomInboxPrefix, the
	// nats CLI's --inbox-prefix); natsnode reads it from a creds file.
	InboxPrefix string
}

// InboxPrefix returns the inbox prefix of a grant named name: _INBOX.<name>.
func InboxPrefix(name string) string { return "_INBOX." + name }

// Name returns the name of role's grant: the role, or for a worker
// worker.<agent>.<version token>.<tool>.
func Name(role Role, q api.Queue) string {
	if role == Worker {
		return "worker." + q.Agent + "." + api.VersionToken(q.Version) + "." + q.Tool
	}
	return string(role)
}

// The streams and buckets each role owns or reads.
var (
	runnerStreams = []string{protocol.EventsStream, protocol.TasksStream, protocol.TimersStream}
	runnerBuckets = []string{protocol.RunnersBucket, protocol.DriversBucket, protocol.PartitionsBucket, protocol.CommandsBucket, protocol.SnapshotsBucket, protocol.ClaimsBucket}
	// The projector's buckets, and those a reader may read.
	projectorBuckets = append(projector.Buckets(), protocol.ProjectorBucket, protocol.ProjectorLeaseBucket)
)

// commandEndpoints are the command API's endpoints an operator may call.
var commandEndpoints = []string{api.EndpointStart, api.EndpointApprove, api.EndpointReject, api.EndpointDecide, api.EndpointReconcile, api.EndpointReconcileStored, api.EndpointResolve, api.EndpointCancel, api.EndpointPause, api.EndpointResume, api.EndpointRestart}

// Permissions returns role's grant. q names the tool queue of a Worker and
// is ignored for the other roles.
func Permissions(role Role, q api.Queue) (Grant, error) {
	name := Name(role, q)
	inbox := InboxPrefix(name)
	g := Grant{Name: name, InboxPrefix: inbox}
	// Every role: its replies, JetStream account info (a connection
	// checks JetStream is there), and discovering services.
	g.Subscribe = append(g.Subscribe, inbox+".>")
	g.Publish = append(g.Publish, "$JS.API.INFO", "$SRV.PING", "$SRV.PING.>", "$SRV.INFO", "$SRV.INFO.>", "$SRV.STATS", "$SRV.STATS.>")
	switch role {
	case Runner:
		g.Responses = true
		g.Publish = append(g.Publish,
			eventlog.SubjectPrefix+">", // append to the log
			api.TaskSubjectPrefix+">",
			timer.SubjectArm+".>",
			api.StopSubjectPrefix+"*",
			protocol.ForwardPrefix+"*.cmd",
		)
		for _, s := range runnerStreams {
			g.Publish = append(g.Publish, manageStream(s)...)
			g.Publish = append(g.Publish, readStream(s)...)
			g.Publish = append(g.Publish, consume(s, ">")...)
		}
		g.Publish = append(g.Publish,
			"$JS.API.STREAM.PURGE."+protocol.TimersStream,
			// Recreate a weft_runners bucket of an older release on file
			// storage (its keys are heartbeats, put again at once).
			"$JS.API.STREAM.DELETE."+kvStream(protocol.RunnersBucket),
			// Remove a weft_drivers entry by its revision (runner:
			// removeDriverKey).
			"$JS.API.STREAM.MSG.DELETE."+kvStream(protocol.DriversBucket),
		)
		for _, b := range runnerBuckets {
			g.Publish = append(g.Publish, writeBucket(b)...)
		}
		// A start of a new run id reads its tombstone
		// (retention.CheckNotPurged).
		g.Publish = append(g.Publish, readBucket(protocol.PurgesBucket)...)
		// The command API's legal holds (weft.api.hold, retention.Place):
		// the holds' bucket only; it may not change the tombstones'
		// stream (a MaxAge would make purged ids reusable).
		g.Publish = append(g.Publish, writeBucket(protocol.HoldsBucket)...)
		g.Subscribe = append(g.Subscribe,
			api.StopSubjectPrefix+"*",
			protocol.ForwardPrefix+"*.cmd",
			"$SRV.>",
		)
		for _, e := range api.Endpoints() {
			g.Subscribe = append(g.Subscribe, api.SubjectPrefix+e)
		}
		g.Subscribe = append(g.Subscribe, api.SubjectPrefix+api.EndpointReport+".*.*.*", api.SubjectPrefix+api.EndpointSettle+".*.*.*",
			catalog.SubjectPrefix+"*") // the agents it serves (catalog.Serve)
	case Worker:
		if err := validQueue(q); err != nil {
			return Grant{}, err
		}
		c := q.Consumer()
		g.Publish = append(g.Publish,
			// Its consumer only: create or update it with its own filter
			// (the server checks the filter in the subject against the
			// body), read it, take and acknowledge its tasks.
			"$JS.API.CONSUMER.CREATE."+protocol.TasksStream+"."+c+"."+q.Subject(),
			"$JS.API.CONSUMER.INFO."+protocol.TasksStream+"."+c,
			"$JS.API.CONSUMER.MSG.NEXT."+protocol.TasksStream+"."+c,
			"$JS.ACK."+protocol.TasksStream+"."+c+".>",
			// Requeue a task it took but did not start (a draining worker).
			q.Subject(),
			// Report and settle its queue's actions only.
			q.ReportSubject(), q.SettleSubject(),
		)
		// Check that an attempt is current: read the log and the live
		// runners (worker.LogCheck).
		g.Publish = append(g.Publish, readStream(protocol.EventsStream)...)
		g.Publish = append(g.Publish, readBucket(protocol.RunnersBucket)...)
		// Claim an attempt before its body starts (api.ClaimKey; the
		// runner provisions the bucket). Claim keys do not name the
		// queue, so this is not scoped to the worker's own attempts
		// (docs/security.md, "What is not protected").
		g.Publish = append(g.Publish, readBucket(protocol.ClaimsBucket)...)
		g.Publish = append(g.Publish, "$KV."+protocol.ClaimsBucket+".>")
		g.Subscribe = append(g.Subscribe, api.StopSubjectPrefix+"*")
	case Projector:
		g.Responses = true
		g.Publish = append(g.Publish, readStream(protocol.EventsStream)...)
		g.Publish = append(g.Publish, consume(protocol.EventsStream, ">")...)
		for _, b := range projectorBuckets {
			g.Publish = append(g.Publish, writeBucket(b)...)
		}
		// Remove an order index key without a delete marker (docs/adr/0020).
		g.Publish = append(g.Publish, "$JS.API.STREAM.PURGE."+kvStream(protocol.IndexBucket))
		g.Subscribe = append(g.Subscribe, projector.QueryPrefix+".*", "$SRV.>")
	case Operator, Reader, Custodian:
		if role == Operator {
			for _, e := range commandEndpoints {
				g.Publish = append(g.Publish, api.SubjectPrefix+e)
			}
		}
		if role == Custodian {
			g.Publish = append(g.Publish, api.SubjectPrefix+api.EndpointHold, api.SubjectPrefix+api.EndpointReleaseHold)
			g.Publish = append(g.Publish, retentionGrant()...)
		}
		g.Publish = append(g.Publish, projector.QueryPrefix+".*", catalog.SubjectPrefix+"*")
		for _, s := range append([]string{protocol.EventsStream}, kvStreams(projectorBuckets)...) {
			g.Publish = append(g.Publish, readStream(s)...)
		}
		// Follow the log (client.Wait, eventlog.WatchRun): an ordered
		// consumer of its own, filtered on the log's subjects.
		g.Publish = append(g.Publish, follow(protocol.EventsStream, eventlog.SubjectPrefix+">")...)
	default:
		return Grant{}, fmt.Errorf("roles: unknown role %q", role)
	}
	g.Publish, g.Subscribe = dedupe(g.Publish), dedupe(g.Subscribe)
	return g, nil
}

// retentionGrant is what retention.Apply needs (docs/adr/0030 §3), and
// no more: its own buckets (weft_purges: the markers, tombstones and lock;
// weft_holds: the hold check), a watch of the views (which runs there
// are), and the purge of a run from every store it is spread over — the
// log (one purge of weft.ev.<run>.>), the read models, the runtime's
// buckets and its timers (purges by subject) — and the deletion of its
// tasks still queued, read one by one. It may put nothing in those
// stores, take or acknowledge no task and delete no single event. The
// stream purge API takes no subject in its subject, so this may purge any
// run of these streams, or a stream whole: the custodian's credentials
// are the deployment's history, keep them as such (docs/security.md).
func retentionGrant() []string {
	var out []string
	for _, b := range []string{protocol.PurgesBucket, protocol.HoldsBucket} {
		out = append(out, writeBucket(b)...)
	}
	for _, b := range append(projector.Buckets(), protocol.SnapshotsBucket, protocol.ClaimsBucket, protocol.DriversBucket) {
		out = append(out, readBucket(b)...)
		out = append(out, "$JS.API.STREAM.PURGE."+kvStream(b))
	}
	// Views: a watch of every view (an ordered consumer of its own).
	views := kvStream(protocol.ViewsBucket)
	out = append(out,
		"$JS.API.CONSUMER.CREATE."+views+".>",
		"$JS.API.CONSUMER.MSG.NEXT."+views+".>",
		"$JS.API.CONSUMER.DELETE."+views+".>",
		"$JS.FC."+views+".>",
	)
	// The log: reading it is the reader's part.
	out = append(out, "$JS.API.STREAM.PURGE."+protocol.EventsStream)
	out = append(out, "$JS.API.STREAM.INFO."+protocol.TimersStream, "$JS.API.STREAM.PURGE."+protocol.TimersStream)
	out = append(out, readStream(protocol.TasksStream)...)
	out = append(out, "$JS.API.STREAM.MSG.DELETE."+protocol.TasksStream)
	return out
}

// dedupe drops repeated subjects, keeping the first of each.
func dedupe(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := list[:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func validQueue(q api.Queue) error {
	for _, p := range []string{q.Agent, q.Version, q.Tool} {
		if p == "" || strings.ContainsAny(p, " *>@~\t\r\n") {
			return fmt.Errorf("roles: worker queue %q: agent, version and tool are required and hold no space, *, >, @ or ~", q.String())
		}
	}
	if strings.Contains(q.Agent, ".") || strings.Contains(q.Tool, ".") {
		return fmt.Errorf("roles: worker queue %q: an agent or tool name holds no '.'", q.String())
	}
	return nil
}

// manageStream is creating, updating and reading the configuration of
// stream s (provisioning).
func manageStream(s string) []string {
	return []string{"$JS.API.STREAM.CREATE." + s, "$JS.API.STREAM.UPDATE." + s, "$JS.API.STREAM.INFO." + s}
}

// readStream is reading stream s's information and messages.
func readStream(s string) []string {
	return []string{"$JS.API.STREAM.INFO." + s, "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>", "$JS.API.STREAM.MSG.GET." + s}
}

// consume is creating, reading, deleting and pulling from consumers of
// stream s (ordered consumers, KV watchers and key listings included),
// acknowledging their messages and answering their flow control.
func consume(s, consumers string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + s + "." + consumers,
		"$JS.API.CONSUMER.INFO." + s + "." + consumers,
		"$JS.API.CONSUMER.DELETE." + s + "." + consumers,
		"$JS.API.CONSUMER.MSG.NEXT." + s + "." + consumers,
		"$JS.ACK." + s + ".>",
		"$JS.FC." + s + ".>",
	}
}

// follow is creating consumers of stream s filtered on one subject under
// filter and pulling from them: an ordered consumer (no acknowledgement,
// no flow control, removed by the server once unused). Not deleting or
// listing consumers: a follower cannot learn another's consumer name (a
// random token) or remove it.
func follow(s, filter string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + s + ".*." + filter,
		"$JS.API.CONSUMER.MSG.NEXT." + s + ".*",
	}
}

// kvStream is the stream behind KV bucket b.
func kvStream(b string) string { return "KV_" + b }

func kvStreams(buckets []string) []string {
	out := make([]string, len(buckets))
	for i, b := range buckets {
		out[i] = kvStream(b)
	}
	return out
}

// readBucket is reading KV bucket b: its status, its keys and their values.
func readBucket(b string) []string { return readStream(kvStream(b)) }

// writeBucket is owning KV bucket b: provisioning it, reading, listing and
// watching its keys, and putting and deleting them.
func writeBucket(b string) []string {
	s := kvStream(b)
	out := append(manageStream(s), readStream(s)...)
	out = append(out, consume(s, ">")...)
	out = append(out, "$KV."+b+".>")
	return out
}
