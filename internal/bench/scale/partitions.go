package scale

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/runner"
)

// The partition-dependent parts of the harness, in one place: the runner
// options that make a runner own partitions, and the index a takeover
// finds a gone runner's active runs by (docs/adr/0019-partitions.md).

// partitionOptions are the runner options for p partitions (0: the
// runner's default).
func partitionOptions(p int) []runner.Option {
	if p <= 0 {
		return nil
	}
	return []runner.Option{runner.WithPartitions(p)}
}

// partitioned reports whether runners own partitions (runner.Stats lists
// them): the takeover and ownership measures need it.
func partitioned(st runner.Stats) bool { return len(st.Partitions) > 0 }

// indexActive writes what a runner writes before an active run's first
// append, so that the owner of its partition finds it once its driver is
// gone: its weft_drivers entry <nnnn>.<run> naming the driver, in a
// deployment of p partitions.
func indexActive(js jetstream.JetStream, driver string, p int) func(ctx context.Context, run string) error {
	return func(ctx context.Context, run string) error {
		kv, err := js.KeyValue(ctx, runner.DriversBucket)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, runner.DriverKey(run, p), []byte(driver))
		return err
	}
}

// partitionsLanded says that runners own partitions in this build
// (runner.WithPartitions): the scale test's ownership and memory checks
// require them.
const partitionsLanded = true
