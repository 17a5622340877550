package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
)

// Example starts an embedded server, provisions the assets, appends two
// decisions to a run, loses a race, and loads the run back.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)

	node, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		panic(err)
	}
	defer node.Close(ctx)
	if err := provision.Ensure(ctx, node.JetStream(), nil, provision.WithReplicas(1)); err != nil {
		panic(err)
	}
	log := eventlog.New(node.JetStream())
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

	// A decision of two events creates the run (zero Head).
	_, h1, err := log.Append(ctx, "order-42", eventlog.Head{}, at,
		events.ModelRequested{Turn: 1, Incarnation: 1}, events.ModelRequested{Turn: 2, Incarnation: 1})
	if err != nil {
		panic(err)
	}
	// The next decision extends it from its head.
	_, h2, err := log.Append(ctx, "order-42", h1, at, events.ModelRequested{Turn: 3, Incarnation: 1})
	if err != nil {
		panic(err)
	}
	// A writer still at h1 loses and learns the current head.
	_, _, err = log.Append(ctx, "order-42", h1, at, events.ModelRequested{Turn: 9, Incarnation: 1})
	var conflict *eventlog.ConflictError
	fmt.Println("conflict:", errors.As(err, &conflict), conflict.Current == h2)

	envs, head, err := log.Load(ctx, "order-42")
	if err != nil {
		panic(err)
	}
	for _, env := range envs {
		fmt.Println(env.Version, env.Type, env.Prev != "")
	}
	fmt.Println("head version", head.Version)
	// Output:
	// conflict: true true
	// 1 model_requested false
	// 2 model_requested true
	// 3 model_requested true
	// head version 3
}
