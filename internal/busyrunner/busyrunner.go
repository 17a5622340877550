// Package busyrunner starts, for tests, a real Weft deployment that answers
// commands runner_busy for a while and then applies them: an in-process
// nats-server, a real runner (with its in-process worker and the real
// command API, its command-id cache included) and, on request, a real
// projector. At first every partition is owned by a stand-in peer runner,
// "ghost", whose heartbeat says it takes part in no partition: the real
// runner, judging it alive, claims none and forwards every command for a
// run to it (docs/protocol/40-commands.md, "Routing"). The stand-in
// answers the first Busy forwarded commands runner_busy, as an owner busy
// for the whole command timeout does, then leaves as a drained runner does
// (it deletes its liveness key, then its partition keys): the real runner
// claims the partitions and applies the next try itself. Until then every
// try a client makes is answered runner_busy — by the stand-in, or by the
// real runner while the partition has no owner yet — so a client that
// retries with the same command id ends applied, and one that does not
// ends with runner_busy.
package busyrunner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// Echo returns the agent "notes", which answers "echo: " and its input at
// once.
func Echo(t testing.TB) *agent.Agent {
	t.Helper()
	ag, err := agent.New("notes", model.NewRules("notes", model.Rule{Name: "echo", Match: func(model.Request) bool { return true },
		Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("echo: "+model.Input(r))(ctx, r)
		}}),
		nil, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	return ag
}

// Ghost is the id of the stand-in peer runner.
const Ghost = "ghost"

// partitions is the deployment's number of partitions.
const partitions = 4

// lease is the runners' lease.
const lease = time.Second

// Config configures Start.
type Config struct {
	// Agents are the agents the real runner serves.
	Agents []*agent.Agent
	// Busy is how many forwarded commands the stand-in answers
	// runner_busy before it leaves.
	Busy int
	// Refusal, when set, is the stand-in's answer to every forwarded
	// command instead: it never leaves.
	Refusal *weft.Error
	// Silent makes the stand-in take every forwarded command and never
	// answer, as an owner that died holding it: it never leaves.
	Silent bool
	// Projector starts a projector answering the query service.
	Projector bool
}

// Forward is a command the stand-in was forwarded: its kind (the
// endpoint), run and command id.
type Forward struct {
	Kind, Run, CommandID string
}

// Deployment is a running deployment.
type Deployment struct {
	// Server is the NATS server; Server.URL is what other processes
	// connect to.
	Server *natstest.Server

	mu        sync.Mutex
	forwarded []Forward
	left      chan struct{}
}

// Forwarded returns the commands the stand-in answered, in order.
func (d *Deployment) Forwarded() []Forward {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Forward(nil), d.forwarded...)
}

// Left is closed once the stand-in has left (after its Busy answers).
func (d *Deployment) Left() <-chan struct{} { return d.left }

// Start starts a Deployment; t.Cleanup stops it.
func Start(t testing.TB, cfg Config) *Deployment {
	t.Helper()
	s := natstest.Start(t, natstest.WithAssets(append(runner.Assets(lease), projector.Assets()...)...))
	d := &Deployment{Server: s, left: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := runner.Provision(pctx, s.JS, lease); err != nil {
		cancel()
		t.Fatal(err)
	}
	live, err := s.JS.KeyValue(pctx, runner.RunnersBucket)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	parts, err := s.JS.KeyValue(pctx, runner.PartitionsBucket)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// The stand-in is alive (its key is put every lease/5, the bucket's
	// max age is the lease) and owns every partition.
	beat := func() error {
		_, err := live.Put(ctx, Ghost, fmt.Appendf(nil, `{"schema":1,"at":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))
		return err
	}
	if err := beat(); err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := parts.Create(pctx, "config", fmt.Appendf(nil, `{"schema":1,"partitions":%d}`, partitions)); err != nil {
		cancel()
		t.Fatal(err)
	}
	for p := range partitions {
		if _, err := parts.Create(pctx, fmt.Sprintf("p.%04d", p), []byte(Ghost)); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		tk := time.NewTicker(lease / 5)
		defer tk.Stop()
		for {
			select {
			case <-stopBeat:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
				_ = beat()
			}
		}
	}()
	var leave sync.Once
	var sub *nats.Subscription
	sub, err = s.Conn.Subscribe(runner.ForwardPrefix+Ghost+".cmd", func(m *nats.Msg) {
		var f struct {
			Kind string          `json:"kind"`
			Run  string          `json:"run"`
			Body json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(m.Data, &f)
		var head struct {
			CommandID string `json:"command_id"`
			Request   struct {
				CommandID string `json:"command_id"`
			} `json:"request"` // a forwarded start
		}
		_ = json.Unmarshal(f.Body, &head)
		id := head.CommandID
		if id == "" {
			id = head.Request.CommandID
		}
		d.mu.Lock()
		d.forwarded = append(d.forwarded, Forward{Kind: f.Kind, Run: f.Run, CommandID: id})
		n := len(d.forwarded)
		d.mu.Unlock()
		if cfg.Silent {
			return
		}
		refusal := cfg.Refusal
		if refusal == nil {
			refusal = &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s was busy for the whole command timeout", f.Run)}
		}
		body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: refusal})
		if cfg.Refusal == nil && n >= cfg.Busy {
			// Leave as a drained runner does before answering, so that
			// the stand-in answers no more than Busy commands.
			leave.Do(func() {
				_ = sub.Unsubscribe()
				close(stopBeat)
				<-beatDone
				lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer lcancel()
				if err := live.Delete(lctx, Ghost); err != nil {
					t.Errorf("busyrunner: the stand-in's key: %v", err)
				}
				for p := range partitions {
					if err := parts.Delete(lctx, fmt.Sprintf("p.%04d", p)); err != nil {
						t.Errorf("busyrunner: partition %d: %v", p, err)
					}
				}
				close(d.left)
			})
		}
		_ = m.Respond(body)
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := s.Conn.Flush(); err != nil {
		cancel()
		t.Fatal(err)
	}

	r, err := runner.New(s.Conn, s.JS, cfg.Agents, runner.WithLease(lease), runner.WithPartitions(partitions))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rdone, pdone := make(chan error, 1), make(chan error, 1)
	go func() { rdone <- r.Run(ctx) }()
	go func() {
		if !cfg.Projector {
			pdone <- nil
			return
		}
		pdone <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil)
	}()
	t.Cleanup(func() { _ = sub.Unsubscribe(); cancel(); <-rdone; <-pdone })
	if err := api.NewClient(s.Conn).Ready(pctx); err != nil {
		t.Fatal(err)
	}
	if cfg.Projector {
		q := projector.NewClient(s.Conn)
		for {
			_, err := q.Run(pctx, "busyrunner-probe")
			if errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
				break
			}
			if pctx.Err() != nil {
				t.Fatalf("busyrunner: the query service did not answer: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return d
}

// AppliedUnder checks that the command API kept the success reply of the
// command (endpoint, run, id) — the reply of the try that was applied —
// under the command id the client retried with, and that the stand-in was
// forwarded tries tries of it, each carrying that id.
func (d *Deployment) AppliedUnder(t testing.TB, endpoint, run, id string, tries int) {
	t.Helper()
	fw := d.Forwarded()
	if len(fw) != tries {
		t.Fatalf("the busy owner answered %d tries, want %d: %+v", len(fw), tries, fw)
	}
	for _, f := range fw {
		if f.CommandID != id || f.Run != run {
			t.Fatalf("a try carried command id %q for run %q, want %q for %q: %+v", f.CommandID, f.Run, id, run, fw)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := d.Server.JS.KeyValue(ctx, api.CommandsBucket)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(api.SubjectPrefix + endpoint + "\x00" + run + "\x00" + id))
	e, err := kv.Get(ctx, hex.EncodeToString(sum[:16]))
	if err != nil {
		t.Fatalf("no reply kept for command id %s: %v", id, err)
	}
	if re := api.ReplyError(&nats.Msg{Data: e.Value()}); re != nil {
		t.Fatalf("the reply kept for command id %s is %s (%v), want the success", id, e.Value(), re)
	}
}
