package roles_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/roles"
)

// refusals checks that a connection is refused what it must not do.
type refusals struct {
	t *testing.T
	n *natsnode.Node
	v *violations
}

// pub checks that publishing on subject is refused.
func (r refusals) pub(subject string) {
	r.t.Helper()
	if err := r.n.Conn().Publish(subject, []byte(`{"schema":1}`)); err != nil {
		r.t.Fatal(err)
	}
	_ = r.n.Conn().Flush()
	r.v.expect(r.t, `Publish to "`+subject+`"`)
}

// request checks that a request on subject is refused: the server drops
// it (a permission violation), so nobody receives it.
func (r refusals) request(subject string, body string) {
	r.t.Helper()
	nc := r.n.Conn()
	if err := nc.PublishRequest(subject, nc.NewRespInbox(), []byte(body)); err != nil {
		r.t.Fatal(err)
	}
	_ = nc.Flush()
	r.v.expect(r.t, `Publish to "`+subject+`"`)
}

// sub checks that subscribing to subject is refused.
func (r refusals) sub(subject string) {
	r.t.Helper()
	s, err := r.n.Conn().SubscribeSync(subject)
	if err != nil {
		r.t.Fatal(err)
	}
	defer s.Unsubscribe()
	_ = r.n.Conn().Flush()
	r.v.expect(r.t, `Subscription to "`+subject+`"`)
}

// startPay7 starts pay-7 as the operator and waits for its approval
// request: lookup_invoice (1/call_1_1) has run in the runner's worker and
// send_payment (2/call_2_1) waits.
func startPay7(t *testing.T, d *deployment) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := api.NewClient(d.operator.Conn()).Start(ctx, api.StartRequest{Schema: api.Schema, CommandID: "s-1", Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	q := projector.NewClient(d.reader.Conn())
	waitFor(t, "the approval request", func() (bool, bool) {
		it, err := q.Approvals(ctx, projector.InboxRequest{Run: "pay-7"})
		return true, err == nil && len(it) == 1
	})
}

func head(t *testing.T, d *deployment, run string) uint64 {
	t.Helper()
	v, err := projector.NewClient(d.reader.Conn()).History(ctxT(t), projector.HistoryRequest{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	return v.Head.Version
}

// TestWorkerRole: a worker serves its own queue only. It may not append
// to the log, answer or approve commands, take, create or read another
// queue's consumer, report for another tool — neither on that tool's
// subject nor on its own for another tool's action — report on the
// unscoped subject, read other roles' replies, forge a reply, or write a
// read model.
func TestWorkerRole(t *testing.T) {
	d := deploy(t)
	startPay7(t, d)
	before := head(t, d, "pay-7")
	r := refusals{t, d.worker, d.vw}

	// The log.
	r.pub("weft.ev.pay-7.events")
	r.request("$JS.API.STREAM.DELETE.WEFT_EVENTS", "")
	r.request("$JS.API.STREAM.PURGE.WEFT_EVENTS", "")
	// Another queue's tasks and consumers.
	other := lookupQueue.Consumer()
	r.request("$JS.API.CONSUMER.MSG.NEXT.WEFT_TASKS."+other, `{"batch":1}`)
	r.request("$JS.API.CONSUMER.INFO.WEFT_TASKS."+other, "")
	r.request("$JS.API.CONSUMER.CREATE.WEFT_TASKS."+other+"."+lookupQueue.Subject(), "{}")
	r.request("$JS.API.CONSUMER.CREATE.WEFT_TASKS."+payQueue.Consumer()+"."+lookupQueue.Subject(), "{}") // its own name, another filter
	r.request("$JS.API.CONSUMER.DURABLE.CREATE.WEFT_TASKS."+payQueue.Consumer(), "{}")
	r.request("$JS.API.CONSUMER.DELETE.WEFT_TASKS."+payQueue.Consumer(), "")
	r.pub(lookupQueue.Subject()) // a task for another queue
	// Reporting and settling for another tool.
	rep := api.Report{Schema: api.Schema, CommandID: "forged", Run: "pay-7", Action: "1/call_1_1", Attempt: 1, Incarnation: 1, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{}`)}
	body, _ := json.Marshal(rep)
	r.request(lookupQueue.ReportSubject(), string(body))
	r.request(lookupQueue.SettleSubject(), string(body))
	r.request(api.ReportSubject, string(body))
	r.request(api.SettleSubject, string(body))
	m, err := d.worker.Conn().Request(payQueue.ReportSubject(), body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var er api.ErrorReply
	if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == nil || er.Error.Code != weft.CodeWrongReference || er.Error.Reason != api.ReasonOtherQueue {
		t.Fatalf("a report on its own queue for lookup_invoice's action: %s, want wrong_reference other_queue", m.Data)
	}
	// Commands and queries it has no business with.
	r.request("weft.api.approve", `{"schema":1,"command_id":"w","run":"pay-7","action":"2/call_2_1","revision":1,"approver":"desk","credential":"worker"}`)
	r.request("weft.api.start", `{"schema":1,"agent":"payment-desk","input":"pay invoice INV-7"}`)
	r.request("weft.api.query.run", `{"run":"pay-7"}`)
	// Impersonating services, and reading others' replies.
	r.sub("weft.api.approve")
	r.sub("weft.api.report")
	r.sub("weft.api.query.run")
	r.sub("_INBOX.>")
	r.sub("_INBOX.operator.>")
	r.sub("_INBOX.worker." + demo.AgentName + ".1.lookup_invoice.>")
	r.sub(lookupQueue.Subject())
	r.pub("_INBOX.operator.forged")
	// The read models and the runner's buckets.
	r.pub("$KV.weft_views.pay-7")
	r.pub("$KV.weft_drivers.pay-7")

	if after := head(t, d, "pay-7"); after != before {
		t.Fatalf("pay-7 moved from version %d to %d", before, after)
	}
	// Its own job still works after all that: take and report its task.
	if _, err := api.NewClient(d.operator.Conn()).Approve(ctxT(t), api.ApproveRequest{Schema: api.Schema, CommandID: "a-1", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pay-7 finished", func() (bool, bool) {
		v, err := projector.NewClient(d.reader.Conn()).Run(ctxT(t), "pay-7")
		return true, err == nil && v.Status == "finished"
	})
}

// TestReaderRole: a reader reads, and follows the log with ordered
// consumers of its own (TestRolesDoTheirJobs); it may not approve,
// reject, start, cancel or reconcile, take tasks, append, write a read
// model, answer a query in the projector's place, read others' replies,
// list, delete or acknowledge the log's consumers, create one without a
// filter under weft.ev., or consume a read model's stream.
func TestReaderRole(t *testing.T) {
	d := deploy(t)
	startPay7(t, d)
	before := head(t, d, "pay-7")
	r := refusals{t, d.reader, d.vr}

	approve := `{"schema":1,"command_id":"r","run":"pay-7","action":"2/call_2_1","revision":1,"approver":"desk","credential":"reader"}`
	r.request("weft.api.approve", approve)
	// The Go client says permission_denied as soon as the server refuses
	// the publish (api.Request), well before its deadline: a minute here,
	// so that a client waiting for it would answer the deadline instead.
	actx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	_, err := api.NewClient(d.reader.Conn()).Approve(actx, api.ApproveRequest{Schema: api.Schema, CommandID: "r-2", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "reader"})
	if weft.ErrorCode(err) != weft.CodePermissionDenied || !strings.Contains(err.Error(), "weft.api.approve") {
		t.Fatalf("the reader's approve through the Go client: %v, want permission_denied naming weft.api.approve (nobody received it)", err)
	}
	// Package client (which the console and the MCP servers use) says
	// which role's credentials may, as the CLI does (roles.Explain):
	// approve, start and cancel are the operator's. Before, it named the
	// subject only.
	c, err := client.New(d.reader.Conn(), client.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	for subject, send := range map[string]func() error{
		"weft.api.approve": func() error {
			_, err := c.Approve(actx, api.ApproveRequest{CommandID: "r-3", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "reader"})
			return err
		},
		"weft.api.start": func() error {
			_, err := c.Start(actx, api.StartRequest{Run: "pay-8", Agent: demo.AgentName, Input: "pay invoice INV-8"})
			return err
		},
		"weft.api.cancel": func() error {
			_, err := c.Cancel(actx, api.CancelRequest{CommandID: "r-4", Run: "pay-7", Reason: "no", By: "reader"})
			return err
		},
	} {
		if err := send(); weft.ErrorCode(err) != weft.CodePermissionDenied || !strings.Contains(err.Error(), "publish to "+subject+"; the credentials of role operator may") {
			t.Errorf("the reader's %s through package client: %v, want permission_denied naming it and role operator", subject, err)
		}
	}
	r.request("weft.api.reject", `{"schema":1,"command_id":"r","run":"pay-7","action":"2/call_2_1","revision":1,"reason":"no"}`)
	r.request("weft.api.start", `{"schema":1,"agent":"payment-desk","input":"pay invoice INV-7"}`)
	r.request("weft.api.cancel", `{"schema":1,"command_id":"r","run":"pay-7"}`)
	r.request("weft.api.reconcile", `{"schema":1,"command_id":"r","run":"pay-7","action":"2/call_2_1","content":{}}`)
	r.request("weft.api.reconcile_stored", `{"schema":1,"command_id":"r","run":"pay-7","action":"2/call_2_1","content":{}}`)
	r.request("weft.api.settle", `{"schema":1,"run":"pay-7","action":"2/call_2_1","outcome":"output","content":{}}`)
	r.request("$JS.API.CONSUMER.MSG.NEXT.WEFT_TASKS."+payQueue.Consumer(), `{"batch":1}`)
	r.request("$JS.API.CONSUMER.CREATE.WEFT_EVENTS.mine", `{"stream_name":"WEFT_EVENTS","config":{"name":"mine"}}`)
	r.request("$JS.API.CONSUMER.DURABLE.CREATE.WEFT_EVENTS.mine", `{"stream_name":"WEFT_EVENTS","config":{"durable_name":"mine"}}`)
	r.request("$JS.API.CONSUMER.DELETE.WEFT_EVENTS.mine", "")
	r.request("$JS.API.CONSUMER.LIST.WEFT_EVENTS", "{}")
	r.request("$JS.API.CONSUMER.NAMES.WEFT_EVENTS", "{}")
	r.pub("$JS.ACK.WEFT_EVENTS.mine.1.1.1.1.0")
	r.request("$JS.API.CONSUMER.CREATE.KV_weft_views.mine.$KV.weft_views.>", "{}")
	r.pub("weft.ev.pay-7.events")
	r.pub("$KV.weft_views.pay-7")
	r.pub("$KV.weft_inbox_approvals.pay-7.2=2Fcall_2_1")
	r.sub("weft.api.query.run")
	r.sub("weft.api.approve")
	r.sub("_INBOX.>")
	r.sub("_INBOX.operator.>")
	r.sub("weft.ev.>")
	if after := head(t, d, "pay-7"); after != before {
		t.Fatalf("pay-7 moved from version %d to %d", before, after)
	}
}

// TestOperatorRole: an operator answers and reconciles, but takes no task,
// publishes no task, appends nothing to the log itself, reports or settles
// nothing (that is a tool's), writes no read model and serves nothing.
func TestOperatorRole(t *testing.T) {
	d := deploy(t)
	startPay7(t, d)
	before := head(t, d, "pay-7")
	r := refusals{t, d.operator, d.vo}

	r.request("$JS.API.CONSUMER.MSG.NEXT.WEFT_TASKS."+payQueue.Consumer(), `{"batch":1}`)
	r.request("$JS.API.CONSUMER.CREATE.WEFT_TASKS.mine."+payQueue.Subject(), "{}")
	r.request("$JS.API.CONSUMER.INFO.WEFT_TASKS."+payQueue.Consumer(), "")
	r.pub(payQueue.Subject())
	r.pub("weft.ev.pay-7.events")
	r.request("weft.api.report", `{"schema":1,"run":"pay-7","action":"2/call_2_1","attempt":1,"incarnation":1,"outcome":"output","content":{}}`)
	r.request(payQueue.ReportSubject(), `{"schema":1,"run":"pay-7","action":"2/call_2_1","attempt":1,"incarnation":1,"outcome":"output","content":{}}`)
	r.request("weft.api.settle", `{"schema":1,"run":"pay-7","action":"2/call_2_1","outcome":"output","content":{}}`)
	r.pub("$KV.weft_views.pay-7")
	r.pub("$KV.weft_commands.x")
	r.pub("weft.stop.pay-7")
	r.pub("weft.runner.x.cmd")
	r.sub("weft.api.approve")
	r.sub("weft.api.query.run")
	r.sub("_INBOX.>")
	r.sub("_INBOX.reader.>")
	r.request("$JS.API.STREAM.DELETE.WEFT_EVENTS", "")
	r.request("$JS.API.CONSUMER.DELETE.WEFT_EVENTS.mine", "")
	if after := head(t, d, "pay-7"); after != before {
		t.Fatalf("pay-7 moved from version %d to %d", before, after)
	}
	// And the approval it may give works.
	if _, err := api.NewClient(d.operator.Conn()).Approve(ctxT(t), api.ApproveRequest{Schema: api.Schema, CommandID: "a-1", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
}

// TestProjectorRole: the projector reads the log and writes the read
// models only: it appends nothing, publishes no task, touches none of the
// runner's buckets, changes no stream it does not own and serves no
// command.
func TestProjectorRole(t *testing.T) {
	d := deploy(t)
	r := refusals{t, d.projector, d.vp}
	r.pub("weft.ev.pay-7.events")
	r.pub(payQueue.Subject())
	r.pub("$KV.weft_drivers.pay-7")
	r.pub("$KV.weft_commands.x")
	r.pub("$KV.weft_snapshots.pay-7")
	r.request("$JS.API.STREAM.UPDATE.WEFT_EVENTS", `{"name":"WEFT_EVENTS","subjects":["weft.ev.>"],"max_age":1000000000}`)
	r.request("$JS.API.STREAM.DELETE.WEFT_EVENTS", "")
	r.request("$JS.API.CONSUMER.MSG.NEXT.WEFT_TASKS."+payQueue.Consumer(), `{"batch":1}`)
	r.request("weft.api.approve", `{"schema":1}`)
	r.sub("weft.api.approve")
	r.sub("weft.api.start")
	r.sub("_INBOX.>")
}

// TestRunnerRole: the runner owns the log, the tasks and its buckets but
// writes no read model, answers no query, may not delete or purge the
// log, and may not change the tombstones' stream (weft_purges: it only
// reads it).
func TestRunnerRole(t *testing.T) {
	d := deploy(t)
	r := refusals{t, d.node, d.v}
	r.pub("$KV.weft_views.pay-7")
	r.pub("$KV.weft_projector.checkpoint")
	r.request("$JS.API.STREAM.DELETE.WEFT_EVENTS", "")
	r.request("$JS.API.STREAM.PURGE.WEFT_EVENTS", "")
	r.request("$JS.API.STREAM.DELETE.KV_weft_views", "")
	// The tombstones: a MaxAge would make purged run ids reusable.
	r.request("$JS.API.STREAM.UPDATE.KV_weft_purges", `{"name":"KV_weft_purges","max_age":1000000000}`)
	r.request("$JS.API.STREAM.CREATE.KV_weft_purges", `{"name":"KV_weft_purges","max_age":1000000000}`)
	r.sub("weft.api.query.run")
	r.sub("_INBOX.>")
	r.sub("_INBOX.operator.>")
	r.pub("_INBOX.operator.forged")
}

// TestCustodianRole (docs/security.md, roles table and "What is not
// protected"): the custodian purges runs by subject and deletes queued
// tasks, but takes, acknowledges or drops no worker's task, forges no
// snapshot, read model, checkpoint, claim or driver entry, changes no
// stream's configuration, deletes no single event, appends nothing and
// answers no approval.
func TestCustodianRole(t *testing.T) {
	d := deploy(t)
	startPay7(t, d)
	before := head(t, d, "pay-7")
	custodian, vc := d.connect(roles.Custodian, api.Queue{})
	r := refusals{t, custodian, vc}

	// A worker's tasks: send_payment's waits in its queue's consumer.
	r.request("$JS.API.CONSUMER.MSG.NEXT.WEFT_TASKS."+payQueue.Consumer(), `{"batch":1}`)
	r.request("$JS.API.CONSUMER.CREATE.WEFT_TASKS.mine."+payQueue.Subject(), "{}")
	r.request("$JS.API.CONSUMER.DELETE.WEFT_TASKS."+payQueue.Consumer(), "")
	r.pub("$JS.ACK.WEFT_TASKS." + payQueue.Consumer() + ".1.1.1.1.0")
	// A run's state, as a runner trusts it (a snapshot), and the other
	// stores retention only purges.
	r.pub("$KV.weft_snapshots.x")
	r.pub("$KV.weft_views.pay-7")
	r.pub("$KV.weft_projector.checkpoint")
	r.pub("$KV.weft_projector_lease.lease")
	r.pub("$KV.weft_claims.pay-7.x")
	r.pub("$KV.weft_drivers.0.pay-7")
	r.request("$JS.API.STREAM.UPDATE.KV_weft_claims", `{"name":"KV_weft_claims","max_age":1000000000}`)
	r.request("$JS.API.STREAM.UPDATE.WEFT_EVENTS", `{"name":"WEFT_EVENTS","subjects":["weft.ev.>"],"max_age":1000000000}`)
	r.request("$JS.API.STREAM.PURGE.KV_weft_projector", "{}")
	// One event out of the middle of a run.
	r.request("$JS.API.STREAM.MSG.DELETE.WEFT_EVENTS", `{"seq":2}`)
	r.request("$JS.API.STREAM.DELETE.WEFT_EVENTS", "")
	r.pub("weft.ev.pay-7.events")
	r.request("weft.api.approve", `{"schema":1,"command_id":"c","run":"pay-7","action":"2/call_2_1","revision":1,"approver":"desk","credential":"custodian"}`)
	r.sub("weft.api.hold")
	r.sub("_INBOX.>")
	if after := head(t, d, "pay-7"); after != before {
		t.Fatalf("pay-7 moved from version %d to %d", before, after)
	}
}
