// Package provision creates or updates the JetStream assets Weft needs:
// streams and KV buckets. Ensure is idempotent: an asset that does not exist
// is created, one that exists is updated in place to the declared
// configuration (so a stream created by an older release gains new
// settings), and an unchanged one is left alone.
//
// The base assets are the log stream WEFT_EVENTS and the tool task stream
// WEFT_TASKS (Base). Other packages declare their own assets (their streams
// and weft_* KV buckets) with Stream and KV and pass them to Ensure, so no
// package needs to edit this one:
//
//	err := provision.Ensure(ctx, js,
//		[]provision.Asset{provision.KV(jetstream.KeyValueConfig{Bucket: "weft_runs"})},
//		provision.WithReplicas(3))
//
// Replicas (WithReplicas): 1, the default, for an embedded or single
// server, 3 on a cluster. An asset whose configuration sets Replicas keeps
// its own value.
package provision

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/protocol"
)

// Names and subjects of the base assets.
const (
	// EventsStream is the stream holding the event log.
	EventsStream = protocol.EventsStream
	// EventsSubjects are the subjects of EventsStream: weft.ev.<run>.events.
	EventsSubjects = "weft.ev.>"
	// TasksStream is the stream of tool tasks, with work-queue retention.
	TasksStream = protocol.TasksStream
	// TasksSubjects are the subjects of TasksStream:
	// weft.task.<agent>.<version>.<tool>.
	TasksSubjects = "weft.task.>"
)

// EventsDuplicates is WEFT_EVENTS's duplicate-detection window: a retried
// append with the same Nats-Msg-Id inside it is stored once.
const EventsDuplicates = 2 * time.Minute

// Option configures Ensure and EnsureOnly; it applies to every asset they
// provision.
type Option func(*options)

type options struct {
	replicas   int
	keepHigher bool
}

// WithReplicas sets the replica count of every asset whose configuration
// leaves it 0; 0 or less keeps the default, 1.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// KeepHigherReplicas makes the replica count WithReplicas sets the larger
// of it and the highest replica count of the assets being provisioned that
// already exist, as runner.Provision does: a component started with the
// default against a cluster whose assets have 3 replicas keeps 3 instead
// of shrinking them. Only the assets' own streams are asked about (a
// role's credentials allow no other). Lowering replicas is an operator's
// decision, made with the nats CLI.
func KeepHigherReplicas() Option { return func(o *options) { o.keepHigher = true } }

// Asset is one stream or KV bucket to provision. Build it with Stream or KV.
type Asset struct {
	stream *jetstream.StreamConfig
	kv     *jetstream.KeyValueConfig
	// atomic: the KV bucket's stream allows atomic batch publish
	// (WithAtomicPublish).
	atomic bool
	// deletes: the KV bucket's stream allows deleting a message by its
	// sequence (WithMessageDelete).
	deletes bool
}

// WithAtomicPublish returns the KV bucket a whose stream also allows
// atomic batch publish (a KeyValueConfig cannot say it): group commit's
// batches of many runs' writes (internal/groupcommit). It is a no-op
// for a stream, whose StreamConfig says it.
func (a Asset) WithAtomicPublish() Asset {
	a.atomic = a.kv != nil
	return a
}

// WithMessageDelete returns the KV bucket a whose stream also allows
// deleting a message by its sequence (the stream's message delete; nats.go
// creates a bucket's stream with DenyDelete, which a KeyValueConfig cannot
// change): an entry removed at its revision with no marker, one write
// where a purge's marker costs two (its write and its expiry;
// docs/adr/0036-driver-entry-removed-by-sequence.md). It is a no-op for a
// stream, whose StreamConfig says it.
func (a Asset) WithMessageDelete() Asset {
	a.deletes = a.kv != nil
	return a
}

// Name is the stream or bucket name.
func (a Asset) Name() string {
	if a.stream != nil {
		return a.stream.Name
	}
	return a.kv.Bucket
}

// StreamName is the name of the asset's stream: the stream's own, or
// KV_<bucket> for a KV bucket.
func (a Asset) StreamName() string {
	if a.stream != nil {
		return a.stream.Name
	}
	return "KV_" + a.kv.Bucket
}

// Stream declares a stream.
func Stream(cfg jetstream.StreamConfig) Asset { return Asset{stream: &cfg} }

// KV declares a KV bucket.
func KV(cfg jetstream.KeyValueConfig) Asset { return Asset{kv: &cfg} }

// EventsConfig is the configuration of WEFT_EVENTS: limits retention, file
// storage, subjects weft.ev.>, a two-minute duplicate window and direct gets
// allowed (the log reads runs with batched direct gets).
//
// The log is never silently discarded: the stream has no limits of its
// own, and its discard policy is DiscardNew, so a limit an operator sets
// (MaxMsgs, MaxBytes, MaxMsgsPerSubject) refuses a new append instead of
// dropping a run's first events. MaxAge must stay unset: an age limit
// expires messages whatever the discard policy. A refused append is not a
// decision: the runner records nothing for it, answers the command
// unavailable (not applied) and retries its own pending work until the
// limit is raised.
func EventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "Weft event log: one message per decision on weft.ev.<run>.events",
		Subjects:    []string{EventsSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		Duplicates:  EventsDuplicates,
		AllowDirect: true,
		// Group commit (docs/adr/0025-group-commit.md) sends concurrent
		// runs' decisions as one atomic batch.
		AllowAtomicPublish: true,
	}
}

// TasksConfig is the configuration of WEFT_TASKS: work-queue retention,
// file storage, subjects weft.task.>.
func TasksConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        TasksStream,
		Description: "Weft tool tasks: weft.task.<agent>.<version>.<tool>, one durable consumer per agent identity and tool",
		Subjects:    []string{TasksSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  EventsDuplicates,
		AllowDirect: true,
		// Group commit sends the stream copies of concurrent runs' handed
		// tasks as one atomic batch
		// (docs/adr/0032-fewer-writes-per-run.md).
		AllowAtomicPublish: true,
	}
}

// Base is the assets every Weft deployment has: WEFT_EVENTS and WEFT_TASKS.
func Base() []Asset { return []Asset{Stream(EventsConfig()), Stream(TasksConfig())} }

// Ensure creates or updates the base assets and then extra, in order. It
// stops at the first asset that cannot be created or updated (for example a
// change the server refuses in place, such as retention) and names it.
func Ensure(ctx context.Context, js jetstream.JetStream, extra []Asset, opts ...Option) error {
	return EnsureOnly(ctx, js, append(Base(), extra...), opts...)
}

// EnsureOnly creates or updates assets, in order, as Ensure does, without
// the base assets: what a component that does not own the log provisions
// (the projector its buckets; with package roles' permissions only the
// runner may create or change WEFT_EVENTS and WEFT_TASKS).
func EnsureOnly(ctx context.Context, js jetstream.JetStream, assets []Asset, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.keepHigher {
		for _, a := range assets {
			n, err := existingReplicas(ctx, js, a.StreamName())
			if err != nil {
				return fmt.Errorf("provision %s: %w", a.Name(), err)
			}
			o.replicas = max(o.replicas, n)
		}
	}
	for _, a := range assets {
		if err := ensure(ctx, js, o, a); err != nil {
			return fmt.Errorf("provision %s: %w", a.Name(), err)
		}
	}
	return nil
}

// existingReplicas is the replica count of the stream (a KV bucket's is
// KV_<bucket>), 0 if it does not exist. A lost answer (a cluster electing
// its meta leader) is asked again, as ensure does, until ctx ends.
func existingReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	back := backoff.New(100*time.Millisecond, 100*time.Millisecond)
	for {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		s, err := js.Stream(actx, stream)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return 0, nil
		case err == nil:
			return s.CachedInfo().Config.Replicas, nil
		case ctx.Err() != nil || !retryable(err):
			return 0, err
		}
		if back.Wait(ctx) != nil {
			return 0, err
		}
	}
}

// AttemptTimeout bounds one create-or-update request. On a cluster a
// request can be lost while a meta leader is elected (or answered 503,
// "temporarily unavailable"); Ensure then sends it again — create-or-update
// is idempotent — until ctx ends.
const AttemptTimeout = 5 * time.Second

func ensure(ctx context.Context, js jetstream.JetStream, opts options, a Asset) error {
	back := backoff.New(100*time.Millisecond, 100*time.Millisecond)
	for {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err := ensureOnce(actx, js, opts, a)
		cancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		if back.Wait(ctx) != nil {
			return err
		}
	}
}

// retryable reports whether err means the request's outcome is unknown or
// the cluster could not answer yet, rather than a refusal.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503
	}
	return false
}

func ensureOnce(ctx context.Context, js jetstream.JetStream, opts options, a Asset) error {
	replicas := opts.replicas
	if replicas <= 0 {
		replicas = 1
	}
	switch {
	case a.stream != nil:
		cfg := *a.stream
		if cfg.Replicas == 0 {
			cfg.Replicas = replicas
		}
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		return err
	case a.kv != nil:
		cfg := *a.kv
		if cfg.Replicas == 0 {
			cfg.Replicas = replicas
		}
		if a.atomic || a.deletes {
			return ensureKVStream(ctx, js, cfg, a)
		}
		_, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	}
	return fmt.Errorf("empty asset")
}

// ensureKVStream creates or updates the KV bucket cfg whose stream allows
// atomic publish (Asset.WithAtomicPublish) or message deletes
// (Asset.WithMessageDelete), as a says, without ever turning them off on
// it: KeyValueConfig cannot say it, so
// CreateOrUpdateKeyValue on an existing bucket would update its stream
// without it, and the server then refuses the batches of the processes
// that use the bucket (and deletes those in progress) until it is turned
// on again (docs/adr/0032-fewer-writes-per-run.md), or their message
// deletes. A new bucket that allows message deletes is created by
// CreateStream with the configuration kvStreamConfig gives (a stream
// update cannot allow deletes); any other new bucket is created by
// CreateOrUpdateKeyValue and then allowed atomic publish before anyone
// uses it. An existing one gets one stream update, only when it differs,
// that applies what cfg governs, keeps atomic publish on and keeps
// denying deletes when it did.
func ensureKVStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, a Asset) error {
	if cfg.Mirror != nil || len(cfg.Sources) > 0 {
		return fmt.Errorf("atomic publish or message deletes on a mirrored or sourced bucket are not supported")
	}
	name := "KV_" + cfg.Bucket
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && a.deletes {
		// A stream's update cannot allow deletes it denied: the bucket's
		// stream is created allowing them.
		want := kvStreamConfig(cfg, jetstream.StreamConfig{Name: name, Subjects: []string{"$KV." + cfg.Bucket + ".>"}}, a)
		if _, err = js.CreateStream(ctx, want); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err = js.Stream(ctx, name) // created meanwhile by another process
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return err
		}
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	want := kvStreamConfig(cfg, have, a)
	// Nor can it allow deletes an older release's bucket denies: that
	// bucket keeps denying them (its users fall back to purges).
	want.DenyDelete = want.DenyDelete || have.DenyDelete
	if sameStreamConfig(want, have) {
		return nil
	}
	_, err = js.UpdateStream(ctx, want)
	return err
}

// kvStreamConfig is the stream configuration of a bucket whose stream's is
// have (an existing bucket's; for a new one, only its name and subjects),
// updated to cfg as CreateOrUpdateKeyValue sets it
// (nats.go's prepareKeyValueConfig, the fields KeyValueConfig governs and
// the ones it fixes; TestAnAtomicBucketIsUpdatedAsCreateOrUpdateKeyValueDoes
// compares them), with atomic publish and message deletes allowed as a
// says. cfg has no mirror or sources.
func kvStreamConfig(cfg jetstream.KeyValueConfig, have jetstream.StreamConfig, a Asset) jetstream.StreamConfig {
	sc := have
	sc.Description = cfg.Description
	sc.MaxMsgsPerSubject = 1
	if cfg.History > 0 {
		sc.MaxMsgsPerSubject = int64(cfg.History)
	}
	sc.MaxBytes, sc.MaxMsgSize = cfg.MaxBytes, cfg.MaxValueSize
	if sc.MaxBytes == 0 {
		sc.MaxBytes = -1
	}
	if sc.MaxMsgSize == 0 {
		sc.MaxMsgSize = -1
	}
	sc.MaxAge = cfg.TTL
	sc.Duplicates = 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < sc.Duplicates {
		sc.Duplicates = cfg.TTL
	}
	sc.Storage = cfg.Storage
	sc.Replicas = max(cfg.Replicas, 1)
	sc.Placement = cfg.Placement
	sc.RePublish = cfg.RePublish
	sc.Compression = jetstream.NoCompression
	if cfg.Compression {
		sc.Compression = jetstream.S2Compression
	}
	sc.AllowMsgTTL, sc.SubjectDeleteMarkerTTL = cfg.LimitMarkerTTL != 0, cfg.LimitMarkerTTL
	sc.AllowRollup, sc.DenyDelete, sc.AllowDirect = true, true, true
	sc.MaxMsgs, sc.MaxConsumers = -1, -1
	sc.Discard = jetstream.DiscardNew
	// The server's own metadata (_nats.*) is kept; the rest is cfg's.
	sc.Metadata = nil
	for k, v := range have.Metadata {
		if strings.HasPrefix(k, "_nats.") {
			mapSet(&sc.Metadata, k, v)
		}
	}
	for k, v := range cfg.Metadata {
		mapSet(&sc.Metadata, k, v)
	}
	sc.AllowAtomicPublish = a.atomic
	sc.DenyDelete = !a.deletes
	return sc
}

func mapSet(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// sameStreamConfig reports whether a and b are the same configuration.
func sameStreamConfig(a, b jetstream.StreamConfig) bool {
	return reflect.DeepEqual(a, b)
}
