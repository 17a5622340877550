package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

func TestStartProvisionsAndRestartKeepsStoreAndURL(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(provision.KV(jetstream.KeyValueConfig{Bucket: "weft_natstest"})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{provision.EventsStream, provision.TasksStream, "KV_weft_natstest"} {
		if _, err := s.JS.Stream(ctx, name); err != nil {
			t.Fatalf("asset %s: %v", name, err)
		}
	}
	_, h, err := s.Log.Append(ctx, "r", eventlog.Head{}, time.Unix(0, 0), events.ModelRequested{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL
	s.Restart()
	if s.URL != url {
		t.Fatalf("URL changed over restart: %s -> %s", url, s.URL)
	}
	got, err := s.Log.Head(ctx, "r")
	if err != nil || got != h {
		t.Fatalf("head after restart %+v, %v; want %+v", got, err, h)
	}
	other := s.Connect()
	if !other.IsConnected() {
		t.Fatal("second connection not connected")
	}
}
