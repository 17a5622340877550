package chaos

// The availability measure (docs/reliability.md, the availability
// budget): from each runner SIGKILL to the first command the workload got
// accepted in each partition the killed runner owned. It judges nothing:
// the figures are a note of the result.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner"
)

// runnerKill is a runner SIGKILL: when, and the partitions its process
// owned then (weft_partitions, read just before the signal).
type runnerKill struct {
	at    time.Time
	parts []int
	np    int // the deployment's number of partitions
}

// noteRunnerKill reads the partitions runner part p's process owns, before
// it is SIGKILLed; the kill's time is set by killed once the signal went.
// A process's runner id is the part's name, or the name and its start's
// number (proc.go).
func (h *harness) noteRunnerKill(ctx context.Context, p *part) *runnerKill {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(rctx, runner.PartitionsBucket)
	if err != nil {
		h.logf("availability: cannot read %s before the SIGKILL of %s: %v", runner.PartitionsBucket, p.name, err)
		return nil
	}
	w, err := kv.WatchAll(rctx, jetstream.IgnoreDeletes())
	if err != nil {
		h.logf("availability: cannot read %s before the SIGKILL of %s: %v", runner.PartitionsBucket, p.name, err)
		return nil
	}
	defer func() { _ = w.Stop() }()
	k := &runnerKill{}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		switch key := e.Key(); {
		case key == "config":
			var c struct {
				Partitions int `json:"partitions"`
			}
			if json.Unmarshal(e.Value(), &c) == nil {
				k.np = c.Partitions
			}
		case strings.HasPrefix(key, "p."):
			owner := string(e.Value())
			if owner != p.name && !strings.HasPrefix(owner, p.name+"-") {
				continue
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(key, "p.")); err == nil {
				k.parts = append(k.parts, n)
			}
		}
	}
	if k.np == 0 || len(k.parts) == 0 {
		h.logf("availability: %s owns no partition before its SIGKILL", p.name)
		return nil
	}
	return k
}

// killed records k (from noteRunnerKill; nil records nothing) as sent now.
func (h *harness) killed(k *runnerKill) {
	if k == nil {
		return
	}
	k.at = time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kills = append(h.kills, *k)
}

// availabilityNote says, over every runner SIGKILL, how long after it the
// workload's first accepted command (sent after the kill) came in each
// partition the killed runner owned — p50, p99 and max, against the lease
// — and in how many partitions no command was sent before the next kill
// (not measured). Empty without kills.
func availabilityNote(kills []runnerKill, cmds []command, lease time.Duration) string {
	if len(kills) == 0 {
		return ""
	}
	slices.SortFunc(kills, func(a, b runnerKill) int { return a.at.Compare(b.at) })
	var lat []time.Duration
	unmeasured := 0
	for i, k := range kills {
		end := time.Time{}
		if i+1 < len(kills) {
			end = kills[i+1].at
		}
		first := map[int]time.Duration{}
		for _, c := range cmds {
			if !c.ok || c.sent.Before(k.at) || (!end.IsZero() && !c.sent.Before(end)) {
				continue
			}
			p := partition.Of(c.run, k.np)
			if d, seen := first[p]; !seen || c.recv.Sub(k.at) < d {
				first[p] = c.recv.Sub(k.at)
			}
		}
		for _, p := range k.parts {
			if d, ok := first[p]; ok {
				lat = append(lat, d)
			} else {
				unmeasured++
			}
		}
	}
	if len(lat) == 0 {
		return fmt.Sprintf("availability: %d runner SIGKILLs; no command was accepted in a partition they owned before the next kill", len(kills))
	}
	slices.Sort(lat)
	at := func(q int) time.Duration { return lat[min(len(lat)-1, len(lat)*q/100)] }
	ratio := func(d time.Duration) float64 { return float64(d) / float64(lease) }
	return fmt.Sprintf("availability: after %d runner SIGKILLs, the first accepted command in %d partitions they owned came p50 %v, p99 %v, max %v after the kill (×%.2f, ×%.2f, ×%.2f the %v lease; budget p99 ≤ 1.5×); %d such partitions got no command before the next kill",
		len(kills), len(lat), at(50).Round(time.Millisecond), at(99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		ratio(at(50)), ratio(at(99)), ratio(lat[len(lat)-1]), lease, unmeasured)
}
