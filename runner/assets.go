package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/unanswered"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner/internal/ownership"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/worker"
)

// Assets lists the JetStream assets the runtime needs besides
// provision.Base: WEFT_TIMERS, and the KV buckets weft_runners (max age =
// lease), weft_drivers, weft_partitions, weft_commands, weft_snapshots and weft_claims
// (worker.ClaimsConfig).
func Assets(lease time.Duration) []provision.Asset {
	return []provision.Asset{
		provision.Stream(timer.StreamConfig()),
		provision.KV(jetstream.KeyValueConfig{Bucket: RunnersBucket, Description: "Weft live runners (heartbeat, max age = lease)", TTL: lease, Storage: jetstream.FileStorage,
			// A key that reaches its max age leaves a marker (judgement).
			LimitMarkerTTL: ownership.MarkerTTL(lease)}),
		provision.KV(jetstream.KeyValueConfig{Bucket: DriversBucket, Description: "Weft runs driven with work in flight, by partition, and their driving runner", Storage: jetstream.FileStorage,
			// An entry is removed by deleting its message (removeDriverKey);
			// the marker of an older release's purge expires.
			LimitMarkerTTL: markerTTL(lease)}).WithMessageDelete(),
		provision.KV(jetstream.KeyValueConfig{Bucket: PartitionsBucket, Description: "Weft partitions: their number (config) and owners (p.<n>)", Storage: jetstream.FileStorage}),
		provision.KV(api.CommandsConfig()),
		provision.KV(jetstream.KeyValueConfig{Bucket: SnapshotsBucket, Description: "Weft run state snapshots with their head", Storage: jetstream.FileStorage}),
		// Group commit batches the claims of concurrent runs' attempts
		// (docs/adr/0032-fewer-writes-per-run.md).
		provision.KV(worker.ClaimsConfig()).WithAtomicPublish(),
	}
}

// CheckMaxPayload returns an error saying what fails when the NATS server
// of nc allows messages smaller than protocol.MaxPayload (8 MiB): a tool
// result near max result bytes (1 MiB by default), with its report's or
// event's envelope, is refused payload_too_large and its action faults. It
// returns nil when nc is not connected yet (its max payload is unknown).
func CheckMaxPayload(nc *nats.Conn) error {
	if mp := nc.MaxPayload(); mp > 0 && mp < protocol.MaxPayload {
		return fmt.Errorf("the NATS server's max_payload is %d bytes, below the %d bytes weft needs: tool results near max result bytes will be refused payload_too_large; set max_payload: 8MB in the server's configuration (docs/protocol/10-log.md)", mp, int64(protocol.MaxPayload))
	}
	return nil
}

// ProvisionOption configures Provision.
type ProvisionOption func(*provisionOptions)

type provisionOptions struct {
	replicas int
	extra    []provision.Asset
}

// WithReplicas sets the replica count of every asset Provision creates or
// updates: 1 for an embedded or single server (the default), 3 on a
// cluster. Provision never lowers the replica count of an existing asset
// (see Provision).
func WithReplicas(n int) ProvisionOption {
	return func(o *provisionOptions) { o.replicas = n }
}

// WithAssets adds assets of other components (such as the projector's
// buckets) that Provision provisions with the same replica count.
func WithAssets(assets ...provision.Asset) ProvisionOption {
	return func(o *provisionOptions) { o.extra = append(o.extra, assets...) }
}

// Provision creates or updates every asset the runtime uses (base streams,
// timers, KV buckets, and those added with WithAssets) with lease as the
// liveness lease. Every asset gets one replica count: the larger of the
// requested one (WithReplicas, default 1) and the highest replica count of
// any of these assets that already exists, so that a runner started with
// the default against a cluster provisioned with 3 replicas keeps 3 and
// never shrinks the deployment. Lowering replicas is an operator's
// decision, made with the nats CLI.
func Provision(ctx context.Context, js jetstream.JetStream, lease time.Duration, opts ...ProvisionOption) error {
	o := provisionOptions{replicas: 1}
	for _, opt := range opts {
		opt(&o)
	}
	assets := append(provision.Base(), Assets(lease)...)
	assets = append(assets, o.extra...)
	replicas := max(o.replicas, 1)
	for _, a := range assets {
		n, err := existingReplicas(ctx, js, a.StreamName())
		if err != nil {
			return err
		}
		replicas = max(replicas, n)
	}
	if err := runnersOnFile(ctx, js); err != nil {
		return err
	}
	if err := provision.Ensure(ctx, js, append(Assets(lease), o.extra...), provision.WithReplicas(replicas)); err != nil {
		return err
	}
	return timer.Ensure(ctx, js, timer.WithReplicas(replicas))
}

// runnersOnFile deletes a weft_runners bucket that an earlier release
// created with memory storage (a server restart emptied it and made every
// runner look gone), so that Provision creates it again on file: JetStream
// cannot change a stream's storage in place. Deleting it is safe: its keys
// are heartbeats every live runner puts again within lease/4, and a runner
// that cannot read the bucket, or does not find its own key in it, judges
// nobody gone meanwhile (see Runner.Run).
func runnersOnFile(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, "KV_"+RunnersBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runner: provision: bucket %s: %w", RunnersBucket, err)
	}
	if s.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		return nil
	}
	if err := js.DeleteKeyValue(ctx, RunnersBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("runner: provision: move bucket %s to file storage: %w", RunnersBucket, err)
	}
	return nil
}

// existingReplicas is the replica count of the stream (a KV bucket's is
// KV_<bucket>), 0 if it does not exist. Only the asset's own stream is
// asked about: a runner's credentials (package roles) allow no other.
func existingReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("runner: provision: stream %s: %w", stream, err)
	}
	return s.CachedInfo().Config.Replicas, nil
}

// ensureTaskConsumers creates the durable consumer of each external tool
// in each agent identity that binds it, weft_task_<agent>@<version>@<tool>
// (docs/protocol/41-tasks.md), so that a worker outside the process — even
// the nats CLI — only takes tasks. An existing consumer is left as it is
// (a worker may have configured it otherwise).
func (r *Runner) ensureTaskConsumers(ctx context.Context) error {
	for _, q := range r.externalQueues() {
		_, err := r.js.CreateConsumer(ctx, api.TaskStream, worker.ConsumerConfig(q, worker.DefaultAckWait))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("runner: consumer %s: %w", q.Consumer(), err)
		}
	}
	return nil
}

// checkExternal refuses an external tool name that no served agent binds
// as a tool body: its tasks would never exist, and the tool meant to run
// elsewhere would run in this process.
func (r *Runner) checkExternal() error {
	bound := map[string]bool{}
	for _, q := range r.externalQueues() {
		bound[q.Tool] = true
	}
	var unknown []string
	for n := range r.external {
		if !bound[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("runner: external tools %v: no served agent binds a tool body of that name", unknown)
	}
	return nil
}

// externalQueues lists the queues of the external tools: every agent
// identity's binding of each tool named in WithExternalTools.
func (r *Runner) externalQueues() []api.Queue {
	var qs []api.Queue
	for _, ag := range r.list {
		for _, t := range ag.Tools() {
			if _, sub := agent.SubAgent(t); !sub && r.external[t.Name()] {
				qs = append(qs, api.Queue{Agent: ag.Name(), Version: ag.Version(), Tool: t.Name()})
			}
		}
	}
	return qs
}

// lookUpAssets looks up the buckets Run uses and ensures the task
// consumers, again and again while the server does not answer — a runner
// started while its server restarts waits for it instead of returning —
// until ctx ends. Each attempt has its own deadline, doubling from 2 s up
// to 16 s (a request sent while the server restarts may never be
// answered). A missing asset is returned at once.
func (r *Runner) lookUpAssets(ctx context.Context) error {
	back, limit := backoff.New(100*time.Millisecond, 2*time.Second), backoff.New(2*time.Second, 16*time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, limit.Next())
		err := r.assets(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered.Is(err) {
			return err
		}
		r.log.Warn("runner: the server does not answer; retrying", "err", err)
		if back.Wait(ctx) != nil {
			return err
		}
	}
}

// assets is one attempt of lookUpAssets.
func (r *Runner) assets(ctx context.Context) error {
	var err error
	if r.live, err = r.js.KeyValue(ctx, RunnersBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", RunnersBucket, err)
	}
	// The bucket's max age is the lease every runner is judged by: beat
	// within it even when this runner was configured with another lease
	// (the bucket was provisioned by someone else), or peers would take
	// its runs over between two heartbeats.
	// Its markers of expired keys let a runner judge sooner (judgement).
	if st, err := r.live.Status(ctx); err == nil {
		if st.TTL() > 0 && st.TTL() != r.lease {
			r.log.Warn("the runners bucket's max age overrides the configured lease", "lease", r.lease, "bucket_max_age", st.TTL())
			r.lease = st.TTL()
		}
	}
	if r.liveStream, err = r.js.Stream(ctx, "KV_"+RunnersBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", RunnersBucket, err)
	}
	if r.drivers, err = r.js.KeyValue(ctx, DriversBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", DriversBucket, err)
	}
	if r.driversStream, err = r.js.Stream(ctx, "KV_"+DriversBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", DriversBucket, err)
	}
	if r.driversStream.CachedInfo().Config.DenyDelete {
		// Made by an earlier release (or nats.go's CreateOrUpdateKeyValue):
		// no update allows deletes, so entries are purged, as before.
		r.purgeDrivers.Store(true)
		r.log.Warn("the drivers bucket denies message deletes: its entries are purged with markers (an fsync more each); "+
			"recreate it as docs/adr/0036-driver-entry-removed-by-sequence.md says", "bucket", DriversBucket)
	}
	if r.partKV, err = r.js.KeyValue(ctx, PartitionsBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", PartitionsBucket, err)
	}
	if r.cmds, err = r.js.KeyValue(ctx, api.CommandsBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", api.CommandsBucket, err)
	}
	if r.snaps, err = r.js.KeyValue(ctx, SnapshotsBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", SnapshotsBucket, err)
	}
	if err := r.ensureTaskConsumers(ctx); err != nil {
		return err
	}
	return nil
}
