package api_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/weftrun/weft/api"
)

// The task protocol's wire types are in package api: a
// worker written without package worker decodes the task body of
// docs/protocol/41-tasks.md, names its queue's subjects and its claim, and
// encodes its report and settlement, importing api alone.
func TestAnOutsideWorkerNeedsOnlyAPI(t *testing.T) {
	const body = `{"schema":1,"run":"pay-7","action":"1/call_1_1","agent":"payment-desk","version":"1","tool":"lookup_invoice","attempt":1,"incarnation":1,
 "claim":"pay-7.MS9jYWxsXzFfMQ.1.1","fence_version":5,"arguments":{"id":"INV-7"},"timeout_ms":60000,"deadline":"2026-11-30T10:00:00Z",
 "max_result_bytes":1048576,"settle_within_ms":0,
 "idempotency_key":"<hex>","correlation":"ticket-42","reviewer":"alice"}`
	var task api.Task
	if err := json.Unmarshal([]byte(body), &task); err != nil {
		t.Fatal(err)
	}
	if task.Run != "pay-7" || task.Action != "1/call_1_1" || task.Tool != "lookup_invoice" || task.FenceVersion != 5 || task.Deadline == nil || task.Reviewer != "alice" {
		t.Fatalf("decoded %+v", task)
	}
	if got := api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation); got != task.Claim {
		t.Fatalf("claim key %s, the task's claim is %s", got, task.Claim)
	}
	var claim api.Claim
	if err := json.Unmarshal([]byte(`{"schema":1,"worker":"w-1","token":"ab","claimed":"2026-11-30T09:00:00Z","report":{"schema":1,"run":"pay-7","action":"1/call_1_1","attempt":1,"incarnation":1,"outcome":"output","content":{"id":"INV-7"}}}`), &claim); err != nil {
		t.Fatal(err)
	}
	if claim.Report == nil || claim.Report.Outcome != api.OutcomeOutput || string(claim.Report.Content) != `{"id":"INV-7"}` {
		t.Fatalf("claim %+v: the saved report is not read", claim)
	}
	q := api.Queue{Agent: "acc-ver", Version: "2.0", Tool: "ver_echo"}
	for got, want := range map[string]string{
		q.Subject():       "weft.task.acc-ver.2~0.ver_echo",
		q.Consumer():      "weft_task_acc-ver@2~0@ver_echo",
		q.ReportSubject(): "weft.api.report.acc-ver.2~0.ver_echo",
		q.SettleSubject(): "weft.api.settle.acc-ver.2~0.ver_echo",
	} {
		if got != want {
			t.Errorf("subject %s, want %s", got, want)
		}
	}
	if back := api.QueueOf("acc-ver", "2~0", "ver_echo"); back != q {
		t.Errorf("QueueOf %+v, want %+v", back, q)
	}
	rep := api.Report{Schema: api.Schema, CommandID: "report/pay-7/1/call_1_1/1/1", Run: task.Run, Action: task.Action, Attempt: task.Attempt,
		Incarnation: task.Incarnation, Outcome: api.OutcomeLost, Cause: api.CauseTimedOut, Worker: "w-1"}
	if b, _ := json.Marshal(rep); !strings.Contains(string(b), `"outcome":"lost","cause":"timed_out"`) {
		t.Errorf("report %s", b)
	}
	s := api.Settlement{Schema: api.Schema, Run: task.Run, Action: task.Action, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"INV-7"}`)}
	if b, _ := json.Marshal(s); !strings.Contains(string(b), `"outcome":"output","content":{"id":"INV-7"}`) {
		t.Errorf("settlement %s", b)
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/weftrun/weft/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/weftrun/weft/worker" {
			t.Fatal("package api depends on package worker")
		}
	}
}
