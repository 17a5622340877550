package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// BenchmarkTaskStart measures a worker's latency per task, one task at a
// time, on a real server over TCP loopback: take the task, check it, start
// a trivial body, report and ack (docs/adr/0010: the attempt's claim is
// part of it). The check is a no-op and the reporter local, so the figure
// is the worker's own path.
func BenchmarkTaskStart(b *testing.B) {
	s := natstest.Start(b)
	nc := s.Connect()
	js, _ := jetstream.New(nc)
	reported := make(chan struct{}, 1)
	w := worker.New(nc, js, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }),
		worker.WithReporter(func(context.Context, api.Report) error { reported <- struct{}{}; return nil }))
	w.Handle(queue("echo"), func(_ context.Context, t api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: t.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(b, "the echo queue's consumer made by the worker", func() (bool, string) {
		_, err := s.JS.Consumer(ctx, api.TaskStream, queue("echo").Consumer())
		return err == nil, fmt.Sprint(err)
	})
	tasks := make([][]byte, b.N)
	for i := range tasks {
		tasks[i], _ = json.Marshal(api.Task{Schema: 1, Run: fmt.Sprint("r", i), Action: "1/call_1", Agent: "a", Version: "1", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: 60000})
	}
	b.ResetTimer()
	for _, t := range tasks {
		if _, err := js.Publish(ctx, queue("echo").Subject(), t); err != nil {
			b.Fatal(err)
		}
		<-reported
	}
}

// BenchmarkClaimCreate measures the claim alone: one create-only KV put
// with a TTL on weft_claims (file storage), sequential, over TCP loopback.
func BenchmarkClaimCreate(b *testing.B) {
	s := natstest.Start(b)
	nc := s.Connect()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		b.Fatal(err)
	}
	v := []byte(`{"schema":1,"worker":"w-1","token":"0123456789abcdef","claimed":"2026-01-01T00:00:00Z"}`)
	b.ResetTimer()
	for i := range b.N {
		if _, err := kv.Create(ctx, api.ClaimKey(fmt.Sprint("r", i), "1/call_1", 1, 1), v, jetstream.KeyTTL(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}
