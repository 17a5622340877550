package natsnode_test

import (
	"context"
	"fmt"
	"os"

	"github.com/weftrun/weft/natsnode"
)

// ExampleRun is the shape of a Weft main: Run starts the node (embedded
// here, external when NATS_URL is set), runs the work until it returns or
// SIGTERM arrives, then drains, shuts the server down and waits for it.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "weft-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	err = natsnode.Run(context.Background(), func(ctx context.Context, n *natsnode.Node) error {
		// A real main runs its runner, projector or demo here, returning
		// when ctx ends (SIGTERM or interrupt).
		fmt.Println("embedded:", n.Embedded())
		return nil
	}, append(natsnode.FromEnv(func(string) string { return "" }), natsnode.WithDataDir(dir))...)
	fmt.Println("stopped:", err)
	// Output:
	// embedded: true
	// stopped: <nil>
}
