package demo_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/syncbuf"
)

// cancelOn is a slog handler that calls cancel when a record with message
// msg is logged: a point in the node's startup, without timing.
type cancelOn struct {
	msg    string
	cancel context.CancelFunc
}

func (h cancelOn) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOn) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.cancel()
	}
	return nil
}
func (h cancelOn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelOn) WithGroup(string) slog.Handler      { return h }

// A demo stopped (SIGTERM) before its node was ready still says what it
// handed off, as a later stop does (docs/semantics.md §8, graceful drain:
// the run is handed off): here the runner's first start records the
// deployment's partitions, before it serves the command API, and the stop
// comes then. Run returns nil and prints the stop line.
func TestDemoStoppedBeforeReadySaysWhatItHandedOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	out := &syncbuf.Buffer{}
	logger := slog.New(cancelOn{msg: "recorded the deployment's partitions", cancel: stop})
	err := demo.Run(rctx, demo.Options{DataDir: t.TempDir(), Listen: "0", Stdout: out, Logger: logger, Weft: "weft",
		Ready: func(string) { t.Error("the node became ready after the stop") }})
	if err != nil {
		t.Fatalf("demo.Run: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "Stopped: no run was in flight; nothing handed off.") {
		t.Fatalf("a stop before the node was ready says nothing of what was handed off:\n%s", out)
	}
}
