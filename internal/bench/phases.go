package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
)

// history measures the log's bytes per turn of one agentHistory run.
func (b *bencher) history(ctx context.Context) error {
	if err := b.startRuntime(ctx); err != nil {
		return err
	}
	w, err := b.newWatcher()
	if err != nil {
		return err
	}
	defer w.close()
	turns := pick(b, 10, 100)
	b.progress("history: one run of %d turns, each a %d-byte assistant text and a %d-byte tool result", turns, len(assistantText), len(blobData)+len(`{"data":""}`))
	s, err := b.srv.js.Stream(ctx, provision.EventsStream)
	if err != nil {
		return err
	}
	bytes0 := s.CachedInfo().State.Bytes
	id := fmt.Sprintf("hist-%d", time.Now().UnixNano())
	res := b.clients(ctx, w, 1, 5*time.Minute, 1, agentHistory, "turns="+strconv.Itoa(turns), "run_finished", id)
	if len(res.runs) != 1 {
		return fmt.Errorf("the history run did not finish: %v", res.lastErr)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	stored := info.State.Bytes - bytes0
	envs, _, err := eventlog.New(b.srv.js).Load(ctx, res.runs[0])
	if err != nil {
		return err
	}
	var envBytes, payload int
	for _, env := range envs {
		raw, _ := json.Marshal(env)
		envBytes += len(raw) - len(env.Payload)
		payload += len(env.Payload)
	}
	msgBytes := float64(len(assistantText) + len(blobData) + len(`{"data":""}`))
	b.add(Row{Section: SectionHistory, Name: "log bytes per turn", Value: float64(stored) / float64(turns), Unit: "bytes",
		Baseline: "the turn's message bytes", BaseValue: msgBytes, BaseUnit: "bytes",
		Note: fmt.Sprintf("stored bytes of WEFT_EVENTS for the run (%d events, %.1f per turn), over %d turns; target ≤ 3×", len(envs), float64(len(envs))/float64(turns), turns)})
	b.add(Row{Section: SectionHistory, Name: "envelope bytes per event", Value: float64(envBytes) / float64(len(envs)), Unit: "bytes",
		Baseline: "payload bytes per event", BaseValue: float64(payload) / float64(len(envs)), BaseUnit: "bytes",
		Note: "id, run, version, type, schema, recorded time, previous hash and the JSON keys around the payload"})
	return nil
}

// rebuild times projector.Rebuild over the whole log against a raw
// ordered read of it.
func (b *bencher) rebuild(ctx context.Context) error {
	b.stopRuntime()
	b.progress("rebuild: raw ordered read of WEFT_EVENTS, then projector.Rebuild")
	rate, count, err := orderedRead(ctx, b.srv.js, provision.EventsStream)
	if err != nil {
		return err
	}
	var foldEnd time.Time
	start := time.Now()
	cp, err := projector.Rebuild(ctx, b.srv.js, eventlog.New(b.srv.js), func(phase string, done, total uint64) {
		if phase == "write" && foldEnd.IsZero() {
			foldEnd = time.Now()
		}
	})
	if err != nil {
		return err
	}
	total := time.Since(start)
	if foldEnd.IsZero() {
		foldEnd = time.Now()
	}
	base := Row{Baseline: "raw ordered read of WEFT_EVENTS", BaseValue: rate, BaseUnit: "msgs/s"}
	fold := base
	fold.Section, fold.Name, fold.Value, fold.Unit = SectionRebuild, "rebuild, fold only", float64(cp.Seq)/foldEnd.Sub(start).Seconds(), "msgs/s"
	fold.Note = fmt.Sprintf("%d messages", count)
	b.add(fold)
	all := base
	all.Section, all.Name, all.Value, all.Unit = SectionRebuild, "rebuild, end to end", float64(cp.Seq)/total.Seconds(), "msgs/s"
	all.Note = fmt.Sprintf("%.2f s in all, the read models written to KV; target ≥ 0.5×", total.Seconds())
	b.add(all)
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
