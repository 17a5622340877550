package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
)

// The nats-CLI steps Run prints work verbatim, in order (scenario 20's
// approval and, with send_payment external, scenario 1's worker side): each
// printed line is executed as the nats CLI would (req → request; consumer
// next → fetch one and ack; kv create → a create-only put), none gets an
// error reply, and the run
// finishes. The readiness probe and the steps leave the service's error
// count at zero.
func TestNATSStepsWorkVerbatim(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "external-send_payment"}[external], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rctx, stop := context.WithCancel(ctx)
			urlc := make(chan string, 1)
			var out bytes.Buffer
			done := make(chan error, 1)
			o := demo.Options{DataDir: t.TempDir(), Stdout: &out, Ready: func(u string) { urlc <- u }}
			if external {
				o.ExternalTools = []string{"send_payment"}
			}
			go func() { done <- demo.Run(rctx, o) }()
			var url string
			select {
			case url = <-urlc:
			case err := <-done:
				t.Fatalf("demo.Run: %v", err)
			}
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("demo.Run: %v", err)
				}
			}()
			if !strings.Contains(out.String(), "embedded NATS at "+url) {
				t.Errorf("startup line does not say embedded NATS at %s:\n%s", url, out.String())
			}
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			steps := demo.NATSSteps(url, demo.NATSRun, external)
			for _, st := range steps {
				if !strings.Contains(out.String(), "  "+st+"\n") {
					t.Fatalf("step not printed verbatim: %s", st)
				}
			}
			prefix := "nats --server " + url + " "
			for _, st := range steps {
				cmd := strings.TrimPrefix(st, prefix)
				switch {
				case cmd == "micro ls":
					if _, err := nc.Request("$SRV.PING", nil, 5*time.Second); err != nil {
						t.Fatalf("%s: %v", st, err)
					}
				case strings.HasPrefix(cmd, "consumer next WEFT_TASKS "):
					cons, err := js.Consumer(ctx, "WEFT_TASKS", strings.TrimPrefix(cmd, "consumer next WEFT_TASKS "))
					if err != nil {
						t.Fatalf("%s: %v", st, err)
					}
					msg, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
					if err != nil {
						t.Fatalf("%s: %v", st, err)
					}
					_ = msg.Ack()
				case strings.HasPrefix(cmd, "kv create "):
					// nats kv create <bucket> <key> <value> --ttl <d>
					f := strings.Fields(strings.TrimPrefix(cmd, "kv create "))
					if len(f) != 5 || f[3] != "--ttl" {
						t.Fatalf("%s: unexpected form", st)
					}
					ttl, err := time.ParseDuration(f[4])
					if err != nil {
						t.Fatalf("%s: %v", st, err)
					}
					kv, err := js.KeyValue(ctx, f[0])
					if err != nil {
						t.Fatalf("%s: %v", st, err)
					}
					if _, err := kv.Create(ctx, f[1], []byte(f[2]), jetstream.KeyTTL(ttl)); err != nil {
						t.Fatalf("%s: %v", st, err)
					}
				case strings.HasPrefix(cmd, "req "):
					f := strings.SplitN(strings.TrimPrefix(cmd, "req "), " ", 2)
					subject, body := f[0], strings.Trim(f[1], "'")
					// A person reads the approvals before approving, and
					// the run's view before calling it done: wait as they do.
					want := map[string]string{"weft.api.query.approvals": demo.NATSRun, "weft.api.query.run": `"finished"`}[subject]
					var data []byte
					for deadline := time.Now().Add(20 * time.Second); ; {
						m, err := nc.Request(subject, []byte(body), 5*time.Second)
						if err != nil {
							t.Fatalf("%s: %v", st, err)
						}
						data = m.Data
						if m.Header.Get(micro.ErrorHeader) != "" {
							t.Fatalf("%s: error reply %s", st, data)
						}
						if want == "" || strings.Contains(string(data), want) || time.Now().After(deadline) {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					if want != "" && !strings.Contains(string(data), want) {
						t.Fatalf("%s: %s never showed %s", st, data, want)
					}
				default:
					t.Fatalf("unexpected step %s", st)
				}
			}
			m, err := nc.Request("$SRV.STATS."+api.ServiceName, nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var stats micro.Stats
			if err := json.Unmarshal(m.Data, &stats); err != nil {
				t.Fatal(err)
			}
			for _, e := range stats.Endpoints {
				if e.NumErrors != 0 {
					t.Errorf("%s: %d errors (last %q)", e.Subject, e.NumErrors, e.LastError)
				}
			}
		})
	}
}

// Run on an external server (NATS_URL) says so: it did not start that
// server.
func TestStartupLineNamesExternalServer(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{}, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(rctx, demo.Options{NATSURL: srv.URL, Stdout: &out, Ready: func(string) { ready <- struct{}{} }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("demo.Run: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "external NATS at "+srv.URL+",") || strings.Contains(s, "embedded") || strings.Contains(s, "warning:") {
		t.Fatalf("startup line:\n%s", s)
	}
}
