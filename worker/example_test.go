package worker_test

import (
	"context"
	"encoding/json"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// Example runs a standalone worker for one tool of one agent identity
// (lookup_invoice as bound in payment-desk version 1): it reports over
// weft.api.report.payment-desk.1.lookup_invoice (its queue's subject) to
// whichever runner answers.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	w := worker.New(nc, js, worker.WithID("lookup-worker-1"))
	w.Handle(api.Queue{Agent: "payment-desk", Version: "1", Tool: "lookup_invoice"}, func(ctx context.Context, t api.Task, _ worker.Settler) worker.Result {
		var in struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(t.Arguments, &in); err != nil {
			return worker.Result{Outcome: api.OutcomeExplain, Message: "bad arguments"}
		}
		out, _ := json.Marshal(map[string]string{"id": in.ID, "payee": "ACME Ltd"})
		return worker.Result{Outcome: api.OutcomeOutput, Content: out}
	})
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
