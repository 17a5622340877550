package tsdktest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/runner"
)

// Worker is a worker implementation under RunWorkerSuite, run as a
// process that behaves as GoWorker does (its TypeScript twin is
// sdk/typescript/test/support/hanging-worker.js).
type Worker struct {
	// Command returns the command that runs the worker against the NATS
	// server at url, with a drain grace of graceMS milliseconds (0: the
	// worker's default), serving agent tsdk at version.
	Command func(url string, graceMS int, version string) *exec.Cmd
}

// TypeScriptWorker is the TypeScript worker (sdk/typescript) as a Node
// process, sdk/typescript/test/support/hanging-worker.js of the repository
// at root. It needs Node.js and the package's dependencies (go tool
// -modfile=devtools/go.mod task sdk-ts-deps): without them the test
// fails, never skips.
func TypeScriptWorker(t *testing.T, root string) Worker {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on the PATH: %v", err)
	}
	script, err := filepath.Abs(filepath.Join(root, "sdk/typescript/test/support/hanging-worker.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "sdk/typescript/node_modules/@nats-io/transport-node")); err != nil {
		t.Fatalf("the TypeScript SDK's dependencies are not installed (go tool -modfile=devtools/go.mod task sdk-ts-deps): %v", err)
	}
	return Worker{Command: func(url string, graceMS int, version string) *exec.Cmd {
		return exec.Command(node, script, url, strconv.Itoa(graceMS), version)
	}}
}

// RunWorkerSuite is the conformance suite every worker implementation
// runs (the Go worker and the TypeScript worker): the behaviours the Go
// worker is tested for, against a real runner (host.Run serving Build's
// agent, all tools left to external workers) and nats-server, with the
// worker as a process the suite starts, kills and stops:
//
//   - a run whose tool the worker serves completes;
//   - a second delivery of a claimed attempt is reported lost and its
//     body not started (docs/semantics.md §5);
//   - a body never starts after its deadline (docs/protocol/41-tasks.md
//     rule 1), nor after its run's stop (a cancellation, docs/semantics.md §7);
//   - a delivery whose claim the runtime closed (api.Claim.Closed,
//     docs/adr/0023-closing-attempts.md) is acked, its body never started
//     and nothing reported; so is one whose claim its worker marked not
//     started (api.Claim.NotStarted), which is never taken over even when
//     the requeued task names its token, and which reports the mark (lost,
//     not_started);
//   - a claim taken by a worker that never started the body, named in the
//     requeued task's Weft-Unstarted-Claim header, is taken over and the
//     body started once (docs/protocol/41-tasks.md rules 3 and 9);
//   - a report saved in the claim by a worker that could not deliver it
//     is delivered instead of a loss, the body not started again
//     (docs/protocol/41-tasks.md rule 6);
//   - a report refused as foreign (docs/protocol/41-tasks.md: a report that
//     does not match the action's current attempt) changes nothing: the
//     worker acks its task and the run stays as it was;
//   - a SIGKILL of the worker mid-body makes a non-replayable action
//     uncertain and a replayable one start again once (docs/semantics.md §8);
//   - SIGTERM drains: the running body finishes and is recorded; the drain
//     is bounded by the worker's drain grace (worker_lost);
//   - a task of another agent version is not taken (docs/semantics.md §3);
//   - a settling tool's body that returns after its timeout, within its
//     settle window, settles the action with its output (a late
//     settlement, docs/semantics.md §3).
func RunWorkerSuite(t *testing.T, w Worker) {
	s := newSuite(t, w, false)
	t.Run("ARunWhoseToolTheWorkerServesCompletes", s.completes)
	t.Run("TestSemantics5_ASecondDeliveryOfAClaimedAttemptIsReportedLostAndNotStarted", s.claimed)
	t.Run("TestSemantics3_ABodyNeverStartsAfterItsDeadline", s.deadline)
	t.Run("TestSemantics7_ABodyNeverStartsAfterItsRunsStop", s.afterStop)
	t.Run("TestSemantics8_ADeliveryWhoseClaimWasClosedNeitherStartsNorReports", s.closedClaim)
	t.Run("TestSemantics8_ADeliveryWhoseClaimIsMarkedNotStartedNeitherStartsNorTakesItOverAndReportsTheMark", s.markedClaim)
	t.Run("TestSemantics8_AStaleDeliveryOfAMarkedClaimReportsTheMark", s.staleMarkedClaim)
	t.Run("TestSemantics5_AClaimTakenUnansweredByAWorkerThatNeverStartedTheBodyIsNotALoss", s.unstartedClaim)
	t.Run("TestSemantics8_AReportSavedInTheClaimIsDeliveredInsteadOfALoss", s.savedReport)
	t.Run("TestSemantics5_AReportRefusedAsForeignChangesNothing", s.foreignReport)
	t.Run("TestSemantics8_SIGKILLMidBodyMakesANonReplayableActionUncertain", s.killed)
	t.Run("TestSemantics8_SIGKILLMidBodyStartsAReplayableActionAgainOnce", s.killedReplay)
	t.Run("TestSemantics8_SIGTERMDrainsTheRunningBody", s.drain)
	t.Run("TestSemantics8_TheDrainIsBoundedByTheDrainGrace", s.drainBound)
	t.Run("TestSemantics3_ATaskOfAnotherAgentVersionIsNotTaken", s.otherVersion)
	t.Run("TestSemantics3_ASettlingToolsOwnReturnWinsAfterItsTimeout", s.lateReturn)
}

// newSuite starts a nats-server and a runner serving Build(signingKeys...)'s
// agent with every tool left to external workers, for the worker w; with
// queries, the projector and the query service too (the inboxes a client
// reads), else the runner alone.
func newSuite(t *testing.T, w Worker, queries bool, signingKeys ...string) *suite {
	srv := natstest.Start(t)
	a, err := Build(signingKeys...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	opts := []host.Option{host.WithoutCatalog(),
		host.WithRunnerOptions(runner.WithExternalTools(ToolNames()...), runner.WithDrainWindow(5*time.Second)),
		host.WithReady(func() { close(ready) })}
	if !queries {
		opts = append(opts, host.WithoutQueries())
	}
	go func() {
		done <- host.Run(ctx, srv.Conn, srv.JS, []*agent.Agent{a}, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("host: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the runner did not become ready")
	}
	c, err := client.New(srv.Conn, client.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	return &suite{srv: srv, w: w, api: c}
}

type suite struct {
	srv *natstest.Server
	w   Worker
	api *client.Client // starts and cancels the runs the workers are tested on, each command sent once
}

// proc is a worker process and what it said on stdout.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
	err    error
}

func (s *suite) spawn(t *testing.T, graceMS int, version string) *proc {
	t.Helper()
	p := &proc{cmd: s.w.Command(s.srv.URL, graceMS, version), exited: make(chan struct{})}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = testWriter{t}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the worker: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// starts is how many bodies of run the process started.
func (p *proc) starts(run string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.HasPrefix(l, "STARTED "+run+" ") {
			n++
		}
	}
	return n
}

func (p *proc) said(line string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l == line {
			return true
		}
	}
	return false
}

// waitStarted waits until a body of run started in the process.
func (p *proc) waitStarted(t *testing.T, run string) {
	t.Helper()
	until := time.Now().Add(30 * time.Second)
	for p.starts(run) == 0 {
		select {
		case <-p.exited:
			t.Fatalf("the worker exited (%v) before a body of %s started", p.err, run)
		default:
		}
		if time.Now().After(until) {
			t.Fatalf("no body of %s started in 30 s", run)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not exit within 60 s")
	}
}

// terminate sends the process SIGTERM and waits until it stopped cleanly
// (exit 0, "EXITED").
func (p *proc) terminate(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t)
	if p.err != nil || !p.said("EXITED") {
		t.Fatalf("the worker did not stop cleanly: %v", p.err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("worker: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (s *suite) start(t *testing.T, run, tool string, in In) {
	t.Helper()
	args, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	s.startInput(t, run, fmt.Sprintf(`[{"tool":%q,"args":%s}]`, tool, args))
}

// startInput starts run with input, the JSON array of calls of Build's
// scripted model.
func (s *suite) startInput(t *testing.T, run, input string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.api.Start(ctx, api.StartRequest{Run: run, Agent: AgentName, Input: input}); err != nil {
		t.Fatalf("start %s: %v", run, err)
	}
}

// waitFor waits until the run's state, folded from its log, satisfies ok.
func (s *suite) waitFor(t *testing.T, run string, ok func(RunState) bool) RunState {
	t.Helper()
	until := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := State(ctx, s.srv.JS, run)
		cancel()
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(until) {
			t.Fatalf("run %s: condition not reached in 60 s; last state %+v (err %v)", run, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func status(want string) func(RunState) bool {
	return func(st RunState) bool { return st.Status == want }
}

func (s *suite) consumer(t *testing.T, tool string) jetstream.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.srv.JS.Consumer(ctx, api.TaskStream, api.Queue{Agent: AgentName, Version: agent.DefaultVersion, Tool: tool}.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// take takes the next task of tool's queue as a worker would, unacked.
func (s *suite) take(t *testing.T, tool string) (jetstream.Msg, api.Task) {
	t.Helper()
	batch, err := s.consumer(t, tool).Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("no task of %s was delivered (%v)", tool, batch.Error())
	}
	var task api.Task
	if err := json.Unmarshal(m.Data(), &task); err != nil {
		t.Fatal(err)
	}
	return m, task
}

// acked waits until the task m of tool's queue, given back with Nak, was
// acked by a worker: the consumer's ack floor reached it. (A queue with
// nothing pending says nothing before a worker took the task again: a
// task given back is neither pending nor waiting for its ack.)
func (s *suite) acked(t *testing.T, tool string, m jetstream.Msg) {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	s.ackedSeq(t, tool, md.Sequence.Stream)
}

// ackedSeq waits until the task at stream sequence seq of tool's queue
// was acked by a worker: the consumer's ack floor reached it.
func (s *suite) ackedSeq(t *testing.T, tool string, seq uint64) {
	t.Helper()
	c := s.consumer(t, tool)
	until := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ci, err := c.Info(ctx)
		cancel()
		if err == nil && ci.AckFloor.Stream >= seq {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("the task of %s (stream sequence %d) was not acked: %+v (err %v)", tool, seq, ci, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *suite) completes(t *testing.T) {
	p := s.spawn(t, 0, "1")
	s.start(t, "cf-complete", "echo", In{Text: "hello"})
	st := s.waitFor(t, "cf-complete", status("finished"))
	if st.Outcome != "completed" || string(st.Answer) != `"[{\"text\":\"hello\"}]"` {
		t.Fatalf("outcome %s answer %s", st.Outcome, st.Answer)
	}
	if n := p.starts("cf-complete"); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}

func (s *suite) claimed(t *testing.T) {
	s.start(t, "cf-claimed", "echo", In{Text: "pay"})
	m, task := s.take(t, "echo")
	// A worker took the attempt and vanished mid-body: its claim exists.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := s.srv.JS.KeyValue(ctx, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, task.Claim, []byte(`{"schema":1,"worker":"vanished","token":"0123456789abcdef","claimed":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	st := s.waitFor(t, "cf-claimed", status("suspended"))
	if a := st.Actions[0]; a.State != "uncertain" || !strings.Contains(a.Detail, "claimed before by worker vanished") {
		t.Fatalf("action %+v, want uncertain after the claim of worker vanished", a)
	}
	if n := p.starts("cf-claimed"); n != 0 {
		t.Fatalf("the body of a claimed attempt started %d times", n)
	}
}

func (s *suite) deadline(t *testing.T) {
	s.start(t, "cf-deadline", "slow", In{Text: "late"})
	m, task := s.take(t, "slow")
	if task.Deadline == nil {
		t.Fatal("the slow tool's task has no deadline")
	}
	time.Sleep(time.Until(*task.Deadline) + 200*time.Millisecond)
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	s.acked(t, "slow", m)
	// At the deadline the runtime closed attempt 1's claim, which no
	// worker had taken (docs/semantics.md §8, "Closing an attempt"): it
	// provably did not act, so it is replayed without spending the
	// budget — attempt 2 runs; attempt 1's late delivery never starts.
	st := s.waitFor(t, "cf-deadline", status("finished"))
	if p.said("STARTED cf-deadline 1") {
		t.Fatal("attempt 1's body started after its deadline")
	}
	// On a loaded machine the worker may also come too late for attempt
	// 2 (its process starts after attempt 1's deadline): that attempt is
	// closed unclaimed and replayed too. Exactly the last attempt's body
	// starts, and none of the earlier ones.
	a := st.Actions[0]
	if a.State != "succeeded" || a.Attempts < 2 || !p.said(fmt.Sprintf("STARTED cf-deadline %d", a.Attempts)) {
		t.Fatalf("action %+v, want succeeded by a replay (attempt 1 closed unclaimed, replayed)", a)
	}
	for k := 1; k < a.Attempts; k++ {
		if p.said(fmt.Sprintf("STARTED cf-deadline %d", k)) {
			t.Fatalf("attempt %d's body started, but attempt %d succeeded: an attempt closed unclaimed must never start", k, a.Attempts)
		}
	}
}

func (s *suite) afterStop(t *testing.T) {
	s.start(t, "cf-stopped", "echo", In{Text: "pay"})
	m, _ := s.take(t, "echo")
	// The run is cancelled while its task waits in the queue, delivered
	// to no worker that could hear the stop.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.api.Cancel(ctx, api.CancelRequest{Run: "cf-stopped", By: "test"}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "cf-stopped", status("finished"))
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	s.acked(t, "echo", m)
	if n := p.starts("cf-stopped"); n != 0 {
		t.Fatalf("a body started %d times after its run's stop", n)
	}
}

// claim creates the claim of task's attempt, as another worker or the
// runtime would have.
func (s *suite) claim(t *testing.T, task api.Task, c api.Claim) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := s.srv.JS.KeyValue(ctx, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, task.Claim, b); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) closedClaim(t *testing.T) {
	s.start(t, "cf-closed", "echo", In{Text: "x"})
	m, task := s.take(t, "echo")
	s.claim(t, task, api.Claim{Schema: 1, Claimed: time.Now(), Closed: &api.ClaimClose{By: "runner-x", Why: "cancelled", At: time.Now()}})
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	// A worker acks a task only once its report, if any, was answered:
	// recorded, so the state read after the ack shows it.
	s.acked(t, "echo", m)
	if n := p.starts("cf-closed"); n != 0 {
		t.Fatalf("the body of a closed attempt started %d times", n)
	}
	st := s.waitFor(t, "cf-closed", func(RunState) bool { return true })
	if a := st.Actions[0]; a.State != "running" || a.Attempts != 1 {
		t.Fatalf("action %+v, want running its one attempt: a closed attempt's delivery reports nothing", a)
	}
}

// markedClaim: a worker claimed the attempt, decided not to start its body
// and marked its claim so (docs/protocol/41-tasks.md, "A claim marked not
// started"); the copy it requeued even names that claim's token as one no
// body started under. A delivery that finds the mark neither starts the
// body nor takes the claim over; it reports only the mark (lost, cause
// not_started: docs/protocol/41-tasks.md, "Reporting the mark"), which
// records nothing on a running attempt, and acks.
func (s *suite) markedClaim(t *testing.T) {
	reports := s.reports(t)
	s.start(t, "cf-marked", "echo", In{Text: "x"})
	m, task := s.take(t, "echo")
	s.claim(t, task, api.Claim{Schema: 1, Worker: "w-marked", Token: "0badc0de0badc0de", Claimed: time.Now(),
		NotStarted: &api.ClaimNotStarted{Why: api.ClaimEnded, At: time.Now()}})
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	re := nats.NewMsg(m.Subject())
	re.Data = m.Data()
	re.Header.Set(api.HeaderUnstartedClaim, "0badc0de0badc0de")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := s.srv.JS.PublishMsg(ctx, re, jetstream.WithMsgID(fmt.Sprintf("%s/%s/%d/%d/requeued/%d", task.Run, task.Action, task.Attempt, task.Incarnation, md.Sequence.Stream)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	p := s.spawn(t, 0, "1")
	// A worker acks a task only once its report, if any, was answered.
	s.ackedSeq(t, "echo", ack.Sequence)
	if n := p.starts("cf-marked"); n != 0 {
		t.Fatalf("the body of an attempt whose claim is marked not started started %d times", n)
	}
	st := s.waitFor(t, "cf-marked", func(RunState) bool { return true })
	if a := st.Actions[0]; a.State != "running" || a.Attempts != 1 {
		t.Fatalf("action %+v, want running its one attempt: a marked claim's delivery records nothing", a)
	}
	wantMarkReport(ctx, t, reports, "cf-marked")
	kv, err := s.srv.JS.KeyValue(ctx, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, task.Claim)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Worker != "w-marked" || c.NotStarted == nil {
		t.Fatalf("claim %+v: want w-marked's, still marked not started (never taken over)", c)
	}
}

// reports subscribes to every worker's report until the test ends.
func (s *suite) reports(t *testing.T) chan *nats.Msg {
	t.Helper()
	reports := make(chan *nats.Msg, 16)
	for _, subj := range []string{"weft.api.report", "weft.api.report.>"} {
		sub, err := s.srv.Conn.ChanSubscribe(subj, reports)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return reports
}

// wantMarkReport waits on reports for run's report of a claim marked not
// started (lost, cause not_started) and fails on any other report of run.
func wantMarkReport(ctx context.Context, t *testing.T, reports chan *nats.Msg, run string) {
	t.Helper()
	for {
		var got *nats.Msg
		// Sent before the ack the caller saw; its copy to this
		// connection may still be on its way.
		select {
		case got = <-reports:
		case <-ctx.Done():
			t.Fatal("no report: want the mark reported (lost, not_started)")
		}
		var r api.Report
		if err := json.Unmarshal(got.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Run != run {
			continue
		}
		if r.Outcome != api.OutcomeLost || r.Cause != api.CauseNotStarted {
			t.Fatalf("report %+v: want lost, not_started", r)
		}
		return
	}
}

// staleMarkedClaim: a worker claimed the attempt and marked its claim not
// started, then died before its report; the run was cancelled meanwhile,
// so the next delivery finds the attempt no longer current. It reads the
// claim, reports the mark in the dead worker's place (lost, not_started:
// docs/protocol/41-tasks.md, "Reporting the mark"), never starts the body,
// and acks.
func (s *suite) staleMarkedClaim(t *testing.T) {
	reports := s.reports(t)
	s.start(t, "cf-stale-marked", "echo", In{Text: "x"})
	m, task := s.take(t, "echo")
	s.claim(t, task, api.Claim{Schema: 1, Worker: "w-marked", Token: "0badc0de0badc0df", Claimed: time.Now(),
		NotStarted: &api.ClaimNotStarted{Why: api.ClaimStopped, At: time.Now()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.api.Cancel(ctx, api.CancelRequest{Run: "cf-stale-marked", By: "test"}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "cf-stale-marked", status("finished"))
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	s.acked(t, "echo", m)
	if n := p.starts("cf-stale-marked"); n != 0 {
		t.Fatalf("the body of an attempt whose claim is marked not started started %d times", n)
	}
	wantMarkReport(ctx, t, reports, "cf-stale-marked")
}

func (s *suite) unstartedClaim(t *testing.T) {
	s.start(t, "cf-unstarted", "echo", In{Text: "once"})
	m, task := s.take(t, "echo")
	// A worker created the claim, got no answer, and requeued the task
	// naming its token: no body started under that claim.
	s.claim(t, task, api.Claim{Schema: 1, Worker: "w-gone", Token: "feedfacefeedface", Claimed: time.Now()})
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	re := nats.NewMsg(m.Subject())
	re.Data = m.Data()
	re.Header.Set(api.HeaderUnstartedClaim, "feedfacefeedface")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.srv.JS.PublishMsg(ctx, re, jetstream.WithMsgID(fmt.Sprintf("%s/%s/%d/%d/requeued/%d", task.Run, task.Action, task.Attempt, task.Incarnation, md.Sequence.Stream))); err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	p := s.spawn(t, 0, "1")
	st := s.waitFor(t, "cf-unstarted", status("finished"))
	if st.Outcome != "completed" || p.starts("cf-unstarted") != 1 {
		t.Fatalf("outcome %s, %d starts: want completed after one start", st.Outcome, p.starts("cf-unstarted"))
	}
	kv, err := s.srv.JS.KeyValue(ctx, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, task.Claim)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Worker == "w-gone" || c.Token == "feedfacefeedface" {
		t.Fatalf("claim %+v: want it taken over by the worker, under a token of its own", c)
	}
}

func (s *suite) savedReport(t *testing.T) {
	s.start(t, "cf-saved", "echo", In{Text: "x"})
	m, task := s.take(t, "echo")
	rep := api.Report{Schema: 1, CommandID: fmt.Sprintf("report/%s/%s/%d/%d", task.Run, task.Action, task.Attempt, task.Incarnation),
		Run: task.Run, Action: task.Action, Attempt: task.Attempt, Incarnation: task.Incarnation,
		Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"text":"saved"}`), Worker: "w-gone"}
	s.claim(t, task, api.Claim{Schema: 1, Worker: "w-gone", Token: "0011223344556677", Claimed: time.Now(), Report: &rep})
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	st := s.waitFor(t, "cf-saved", status("finished"))
	if st.Outcome != "completed" || string(st.Answer) != `"[{\"text\":\"saved\"}]"` {
		t.Fatalf("outcome %s answer %s: want completed with the saved report's output", st.Outcome, st.Answer)
	}
	if n := p.starts("cf-saved"); n != 0 {
		t.Fatalf("the body started %d times though its report was saved", n)
	}
}

func (s *suite) foreignReport(t *testing.T) {
	s.start(t, "cf-foreign", "echo", In{Text: "x"})
	m, task := s.take(t, "echo")
	// The attempt's claim holds a report saved by a worker that could not
	// deliver it, for an action the run never had: delivered, it is
	// refused as foreign (answered with success, so the worker acks).
	rep := api.Report{Schema: 1, CommandID: "report/cf-foreign/9/none", Run: task.Run, Action: "9/none", Attempt: 1, Incarnation: task.Incarnation,
		Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"text":"forged"}`)}
	s.claim(t, task, api.Claim{Schema: 1, Worker: "gone", Token: "0011223344556677", Claimed: time.Now(), Report: &rep})
	_ = m.Nak()
	p := s.spawn(t, 0, "1")
	s.acked(t, "echo", m)
	if n := p.starts("cf-foreign"); n != 0 {
		t.Fatalf("the body started %d times under a claim holding a report", n)
	}
	st := s.waitFor(t, "cf-foreign", func(RunState) bool { return true })
	if len(st.Actions) != 1 || st.Actions[0].State != "running" || st.Actions[0].Content != nil {
		t.Fatalf("actions %+v, want the one action still running: a foreign report changes nothing", st.Actions)
	}
}

func (s *suite) killed(t *testing.T) {
	first := s.spawn(t, 0, "1")
	s.start(t, "cf-kill", "echo", In{Text: "pay", Mode: "hang"})
	first.waitStarted(t, "cf-kill")
	_ = first.cmd.Process.Kill()
	first.waitExit(t)
	second := s.spawn(t, 0, "1")
	st := s.waitFor(t, "cf-kill", status("suspended"))
	if a := st.Actions[0]; a.State != "uncertain" || a.Attempts != 1 {
		t.Fatalf("action %+v, want uncertain after one attempt", a)
	}
	if n := second.starts("cf-kill"); n != 0 {
		t.Fatalf("the killed worker's body started again %d times", n)
	}
}

func (s *suite) killedReplay(t *testing.T) {
	first := s.spawn(t, 0, "1")
	s.start(t, "cf-kill-replay", "replay", In{Text: "read", Mode: "hang-first"})
	first.waitStarted(t, "cf-kill-replay")
	_ = first.cmd.Process.Kill()
	first.waitExit(t)
	second := s.spawn(t, 0, "1")
	st := s.waitFor(t, "cf-kill-replay", status("finished"))
	if st.Outcome != "completed" || st.Actions[0].Attempts != 2 {
		t.Fatalf("outcome %s, action %+v: want completed after 2 attempts", st.Outcome, st.Actions[0])
	}
	if n := second.starts("cf-kill-replay"); n != 1 {
		t.Fatalf("the second worker started the body %d times, want 1", n)
	}
}

// warm waits until the worker p serves all its queues: a run calling
// echo and replay completes in it (both workers set their queues up in
// the order echo, slow, settle, replay; slow and settle, with their
// one-second timeouts, are left out, as a loaded machine may miss them).
// A SIGTERM sent before a worker finished setting up tests its start, not
// its drain.
func (s *suite) warm(t *testing.T, p *proc, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	input := `[{"tool":"echo","args":{"text":"w"}},{"tool":"replay","args":{"text":"w"}}]`
	if _, err := s.api.Start(ctx, api.StartRequest{Run: run, Agent: AgentName, Input: input}); err != nil {
		t.Fatalf("start %s: %v", run, err)
	}
	if st := s.waitFor(t, run, status("finished")); st.Outcome != "completed" || p.starts(run) != 2 {
		t.Fatalf("warm-up run %s: outcome %s, %d starts in the worker, want completed and 2", run, st.Outcome, p.starts(run))
	}
}

func (s *suite) drain(t *testing.T) {
	p := s.spawn(t, 0, "1")
	s.warm(t, p, "cf-drain-warm")
	s.start(t, "cf-drain", "echo", In{Text: "done", Mode: "finish"})
	p.waitStarted(t, "cf-drain")
	p.terminate(t)
	if st := s.waitFor(t, "cf-drain", status("finished")); st.Outcome != "completed" {
		t.Fatalf("outcome %s", st.Outcome)
	}
}

func (s *suite) drainBound(t *testing.T) {
	p := s.spawn(t, 300, "1")
	s.warm(t, p, "cf-drain-bound-warm")
	s.start(t, "cf-drain-bound", "echo", In{Text: "hang", Mode: "hang"})
	p.waitStarted(t, "cf-drain-bound")
	p.terminate(t)
	st := s.waitFor(t, "cf-drain-bound", status("suspended"))
	if a := st.Actions[0]; a.State != "uncertain" || !strings.Contains(a.Detail, "drain window ended") {
		t.Fatalf("action %+v, want uncertain, its body stopped at the end of the drain", a)
	}
}

func (s *suite) otherVersion(t *testing.T) {
	v2 := s.spawn(t, 0, "2")
	// v2's consumer exists before the task is published.
	until := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.srv.JS.Consumer(ctx, api.TaskStream, api.Queue{Agent: AgentName, Version: "2", Tool: "echo"}.Consumer())
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("the version 2 worker made no consumer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	v1 := s.spawn(t, 0, "1")
	s.start(t, "cf-version", "echo", In{Text: "v1"})
	s.waitFor(t, "cf-version", status("finished"))
	if n, m := v2.starts("cf-version"), v1.starts("cf-version"); n != 0 || m != 1 {
		t.Fatalf("starts: version 2 worker %d (want 0), version 1 worker %d (want 1)", n, m)
	}
}

func (s *suite) lateReturn(t *testing.T) {
	p := s.spawn(t, 0, "1")
	// settle: a one-second timeout and a ten-second settle window; the
	// body returns after 1.5 s.
	s.start(t, "cf-late", "settle", In{Text: "refunded", Mode: "finish"})
	st := s.waitFor(t, "cf-late", status("finished"))
	if st.Outcome != "completed" || st.Actions[0].State != "succeeded" || string(st.Actions[0].Content) != `{"text":"refunded"}` {
		t.Fatalf("outcome %s, action %+v: want completed, the action succeeded with the late output", st.Outcome, st.Actions[0])
	}
	if n := p.starts("cf-late"); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}
