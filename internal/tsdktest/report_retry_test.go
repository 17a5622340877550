package tsdktest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/internal/tsdktest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_TheTypeScriptWorkerSendsAReportAnsweredInternalAgain: a
// report answered internal — the runtime's own fault, never the report's
// (docs/protocol.md, "internal") — is sent again, as the Go worker does
// (worker.retryable), and the task acked only once a runner took it: the
// body's result is not given up. A stand-in answers the reports of agent
// "standin" (no runner runs): internal first, then success. Before, the
// TypeScript worker acked the task after the internal answer, dropping the
// result.
func TestSemantics8_TheTypeScriptWorkerSendsAReportAnsweredInternalAgain(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	var mu sync.Mutex
	var reports []api.Report
	sub, err := srv.Conn.Subscribe("weft.api.report.standin.1.echo", func(m *nats.Msg) {
		var r api.Report
		_ = json.Unmarshal(m.Data, &r)
		mu.Lock()
		reports = append(reports, r)
		n := len(reports)
		mu.Unlock()
		var body []byte
		if n == 1 {
			body, _ = json.Marshal(api.ErrorReply{Schema: api.Schema, Error: &weft.Error{Code: weft.CodeInternal, Message: "the runtime's own fault"}})
		} else {
			body, _ = json.Marshal(api.Reply{Schema: api.Schema, Run: r.Run, Status: "working"})
		}
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task := api.Task{Schema: 1, Run: "ts-internal", Action: "1/c", Attempt: 1, Incarnation: 1, Agent: "standin", Version: "1", Tool: "echo",
		Arguments: json.RawMessage(`{"text":"once"}`)}
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := srv.JS.Publish(ctx, "weft.task.standin.1.echo", b)
	if err != nil {
		t.Fatal(err)
	}

	cmd := tsdktest.TypeScriptWorker(t, "../..").Command(srv.URL, 0, "1")
	cmd.Env = append(os.Environ(), "TSDK_AGENT=standin", "TSDK_NO_ATTEMPT_CHECK=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
		}
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		_ = cmd.Wait()
	})

	for {
		c, err := srv.JS.Consumer(ctx, api.TaskStream, api.Queue{Agent: "standin", Version: "1", Tool: "echo"}.Consumer())
		if err == nil {
			ci, err := c.Info(ctx)
			if err == nil && ci.AckFloor.Stream >= pa.Sequence {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the task was not acked in 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 || reports[1].CommandID != reports[0].CommandID || string(reports[1].Content) != `{"text":"once"}` {
		t.Fatalf("reports %+v: want the output reported twice under one command id, the first answered internal", reports)
	}
}
