package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/busyrunner"
)

// TestRetryRules_ClientRetriesRunnerBusyWithTheSameCommandID
// (docs/protocol.md "Retry rules"; docs/semantics.md §8 "A run can always be
// answered"): the owner of the run's partition answers runner_busy three
// times, then a real runner takes it over. A Client from New sends the
// start again with the command id it gave it and ends applied. Before, it
// returned the first runner_busy.
func TestRetryRules_ClientRetriesRunnerBusyWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	c, err := client.New(d.Server.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Start(ctx, api.StartRequest{Run: "busy-go", Agent: "notes", Input: "hello"}); err != nil {
		t.Fatalf("start: %v, want it applied after the retries", err)
	}
	fw := d.Forwarded()
	if len(fw) == 0 || fw[0].CommandID == "" {
		t.Fatalf("the tries carried no command id: %+v", fw)
	}
	d.AppliedUnder(t, api.EndpointStart, "busy-go", fw[0].CommandID, 3)
	if _, err := c.Wait(ctx, "busy-go", client.Finished); err != nil {
		t.Fatal(err)
	}
}

// TestRetryRules_ClientWithoutRetryReturnsRunnerBusy: WithoutRetry sends
// the command once and returns runner_busy.
func TestRetryRules_ClientWithoutRetryReturnsRunnerBusy(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	c, err := client.New(d.Server.Conn, client.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Start(ctx, api.StartRequest{Run: "busy-go", Agent: "notes", Input: "hello"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeRunnerBusy}) {
		t.Fatalf("start: %v, want runner_busy", err)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// TestRetryRules_ClientNeverRetriesAPermanentRefusal: a refusal whose code
// is not retryable (run_ended) is returned after one try.
func TestRetryRules_ClientNeverRetriesAPermanentRefusal(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)},
		Refusal: &weft.Error{Code: weft.CodeRunEnded, Reason: "completed", Message: "run busy-go has finished"}})
	c, err := client.New(d.Server.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Cancel(ctx, api.CancelRequest{Run: "busy-go"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeRunEnded}) {
		t.Fatalf("cancel: %v, want run_ended", err)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// ExampleWithoutRetry sends each command once: a retryable answer (such as
// runner_busy) comes back to the caller, who may send the command again
// later with the same command id — weft.Code.Retryable says which answers
// are worth it (docs/protocol.md, "Retry rules").
func ExampleWithoutRetry() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithoutRetry())
	if err != nil {
		log.Fatal(err)
	}
	req := api.CancelRequest{CommandID: "cancel-pay-7", Run: "pay-7", Reason: "duplicate"}
	_, err = c.Cancel(context.Background(), req)
	switch code := weft.ErrorCode(err); {
	case err == nil:
		fmt.Println("cancelled")
	case code.Retryable():
		fmt.Println("not applied; send", req.CommandID, "again later")
	case code == weft.CodeOutcomeUnknown:
		fmt.Println("not known: read the run (Client.Run) before sending a new command id")
	default:
		fmt.Println("refused:", err)
	}
}
