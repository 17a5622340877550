package scale

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/runner"
)

// The partition-dependent parts of the harness, in one place: the runner
// options that make a runner own partitions, and the index a takeover
// finds a gone runner's active runs by.

// partitionOptions are the runner options for p partitions (0: the
// runner's default).
func partitionOptions(p int) []runner.Option {
	_ = p // runner.WithPartitions has not landed yet
	return nil
}

// partitioned reports whether runners own partitions (runner.Stats lists
// them): the takeover and ownership measures need it.
func partitioned(st runner.Stats) bool { return len(st.Partitions) > 0 }

// indexActive writes what a runner writes before an active run's first
// append, so that a takeover finds it: its weft_drivers key naming its
// driver.
func indexActive(js jetstream.JetStream, driver string) func(ctx context.Context, run string) error {
	return func(ctx context.Context, run string) error {
		kv, err := js.KeyValue(ctx, runner.DriversBucket)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, run, []byte(driver))
		return err
	}
}

// partitionsLanded says whether runner.WithPartitions exists in this
// build: the scale test's ownership checks require partitions once it is
// true. Set it with partitionOptions.
const partitionsLanded = false
