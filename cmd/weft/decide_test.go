package main

import (
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
)

// TestSemantics4_CLIDecideAnswersABatch (docs/semantics.md §4, a batch
// decision): `weft decide` selects pending approvals by the inbox's
// filters, shows them with a summary (count, total amount), asks before
// answering unless --yes, answers each with the revision it showed and
// prints an outcome per item.
func TestSemantics4_CLIDecideAnswersABatch(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	startDevCLI(t, "dev", "--nats", s.URL)
	runs := []string{"bd-1", "bd-2", "bd-3"}
	for _, run := range runs {
		if code, out, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", run); code != 0 {
			t.Fatalf("start %s: %d %s %s", run, code, out, errs)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := cli(t, "inbox", "approvals", "--agent", "payment-desk")
		if strings.Count(out, "send_payment") == len(runs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox never listed the three approvals:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Declined at the prompt: nothing is answered.
	confirmIn = strings.NewReader("n\n")
	t.Cleanup(func() { confirmIn = os.Stdin })
	code, out, errs := cli(t, "decide", "approve", "--tool", "send_payment", "--min-amount", "1000", "--approver", "desk", "--credential", "alice")
	if code != 0 || !strings.Contains(errs, "3 pending approval(s) of 3 run(s), total amount 3600 to approve") || !strings.Contains(errs, "nothing was answered") || out != "" {
		t.Fatalf("declined: %d\nstdout %s\nstderr %s", code, out, errs)
	}
	// An amount bound no item meets selects nothing.
	if code, _, errs := cli(t, "decide", "approve", "--max-amount", "1000", "--approver", "desk", "--credential", "alice", "--yes"); code != 0 || !strings.Contains(errs, "no pending approval matches") {
		t.Fatalf("max-amount 1000: %d %s", code, errs)
	}
	// Two named items, approved in one batch.
	code, out, errs = cli(t, "decide", "approve", "--item", "bd-1/2/call_2_1", "--item", "bd-2/2/call_2_1", "--approver", "desk", "--credential", "alice", "--yes", "--batch-id", "cli-b1")
	if code != 0 || !strings.Contains(errs, "2 pending approval(s) of 2 run(s), total amount 2400") || strings.Count(out, "answered") != 2 || strings.Contains(out, "bd-3") {
		t.Fatalf("approve two: %d\nstdout %s\nstderr %s", code, out, errs)
	}
	waitShow(t, "bd-1", "status     finished: completed")
	waitShow(t, "bd-2", "status     finished: completed")
	// The third, rejected.
	code, out, errs = cli(t, "decide", "reject", "--run", "bd-3", "--reason", "not this month", "--approver", "desk", "--credential", "alice", "--yes")
	if code != 0 || !strings.Contains(out, "bd-3") || !strings.Contains(out, "answered") {
		t.Fatalf("reject the third: %d\nstdout %s\nstderr %s", code, out, errs)
	}
	waitShow(t, "bd-3", "rejected")
}

// slowYes says "y" only after wait: a person who reads the selection for
// longer than --timeout before confirming.
type slowYes struct {
	wait time.Duration
	done bool
}

func (r *slowYes) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	time.Sleep(r.wait)
	r.done = true
	return copy(p, "y\n"), nil
}

// TestSemantics8_CLIDecideDeadlineStartsAfterTheConfirmation
// (docs/semantics.md §8; docs/cli.md, weft decide): the time a person
// takes at the confirmation prompt is not the batch's deadline — the
// batch is sent after the confirmation with a whole --timeout of its own —
// and a batch sent but never answered is "not known" (exit 6), naming the
// batch id to send again. Before, the prompt ran inside the deadline: the
// batch was published with a spent context and the CLI said a plain
// failure (exit 1) without the batch id.
func TestSemantics8_CLIDecideDeadlineStartsAfterTheConfirmation(t *testing.T) {
	s := setup(t)
	// A runner that takes the batch and never answers (it died).
	got := make(chan []byte, 4)
	sub, err := s.Conn.Subscribe(api.SubjectPrefix+api.EndpointDecide, func(m *nats.Msg) { got <- m.Data })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := s.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	confirmIn = &slowYes{wait: 2 * time.Second}
	t.Cleanup(func() { confirmIn = os.Stdin })
	code, out, errs := cli(t, "--nats", s.URL, "decide", "approve", "--run", "pay-42", "--approver", "desk", "--credential", "alice",
		"--timeout", "1s", "--no-retry", "--batch-id", "cli-slow")
	if code != exitNotKnown {
		t.Fatalf("exit %d, want %d (not known)\nstdout %s\nstderr %s", code, exitNotKnown, out, errs)
	}
	for _, want := range []string{"outcome_unknown", "cli-slow", "pay-42", "1/c1"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	select {
	case b := <-got:
		var req api.DecideRequest
		if err := json.Unmarshal(b, &req); err != nil || req.BatchID != "cli-slow" || len(req.Items) != 1 || req.Items[0].Action != "1/c1" {
			t.Fatalf("sent %s (%v)", b, err)
		}
	default:
		t.Fatal("the batch was never sent")
	}
}

// TestSemantics4_CLIDecideNeverSplitsARun (docs/protocol/40-commands.md:
// a run's items are decided all or nothing within one batch): weft decide
// packs whole runs into its batches, and refuses, before sending
// anything, a run with more selected items than a batch holds. Before, it
// cut the selection by position, so a run straddling a boundary was two
// decisions.
func TestSemantics4_CLIDecideNeverSplitsARun(t *testing.T) {
	var items []projections.ApprovalItem
	for _, ra := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"b", "2"}, {"c", "1"}, {"b", "3"}} {
		items = append(items, projections.ApprovalItem{Run: ra[0], Action: ra[1]})
	}
	chunks, err := chunkByRun(items, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, ch := range chunks {
		var names []string
		for _, it := range ch {
			names = append(names, it.Run+"/"+it.Action)
		}
		got = append(got, names)
	}
	want := [][]string{{"a/1", "a/2"}, {"b/1", "b/2", "b/3"}, {"c/1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v (each run whole, at most 3 items a batch)", got, want)
	}
	if _, err := chunkByRun(items, 2); err == nil || !strings.Contains(err.Error(), "run b has 3 selected requests") {
		t.Fatalf("a run over the limit: %v, want it refused by name", err)
	}
}
