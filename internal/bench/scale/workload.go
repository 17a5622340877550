package scale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// watcher follows the log's messages as they are published (a core NATS
// subscription, no consumer) and tells waiters when a run recorded an
// event of a kind.
type watcher struct {
	sub *nats.Subscription

	mu    sync.Mutex
	waits map[string]chan struct{} // run + "\x00" + kind
	seen  map[string]bool          // for kinds recorded before anyone waited
}

var watchedKinds = []string{"run_finished", "approval_requested", "run_recovered"}

func newWatcher(nc *nats.Conn) (*watcher, error) {
	w := &watcher{waits: map[string]chan struct{}{}, seen: map[string]bool{}}
	var err error
	w.sub, err = nc.Subscribe("weft.ev.*.events", w.on)
	if err != nil {
		return nil, err
	}
	_ = w.sub.SetPendingLimits(-1, -1)
	return w, nc.Flush()
}

func (w *watcher) on(m *nats.Msg) {
	run := m.Header.Get("Weft-Run")
	for _, k := range watchedKinds {
		if !bytes.Contains(m.Data, []byte(`"type":"`+k+`"`)) {
			continue
		}
		key := run + "\x00" + k
		w.mu.Lock()
		if ch := w.waits[key]; ch != nil {
			close(ch)
			delete(w.waits, key)
		} else {
			w.seen[key] = true
		}
		w.mu.Unlock()
	}
}

// expect returns a channel closed once run records an event of kind (at
// once if it did since the watcher started and nobody waited).
func (w *watcher) expect(run, kind string) <-chan struct{} {
	key := run + "\x00" + kind
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[key] {
		delete(w.seen, key)
		close(ch)
		return ch
	}
	w.waits[key] = ch
	return ch
}

func (w *watcher) forget(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range watchedKinds {
		delete(w.seen, run+"\x00"+k)
	}
}

func (w *watcher) close() { _ = w.sub.Unsubscribe() }

// approveAction is the action every scale run asks an approval for.
var approveAction = aggregate.ActionID(1, "c1")

// approve answers run's approval (revision rev) as reviewer "scale-test".
func approve(ctx context.Context, c *api.Client, run string, rev int) error {
	_, err := c.Approve(ctx, api.ApproveRequest{CommandID: "approve-" + run + fmt.Sprint("-", rev), Run: run, Action: approveAction, Revision: rev,
		Approver: ApproverName, Credential: "scale-test"})
	return err
}

// steady is what a steady workload measured.
type steady struct {
	completed int
	failed    int
	elapsed   time.Duration
	lastErr   error
}

func (s steady) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.completed) / s.elapsed.Seconds()
}

// steadyWorkload runs clients for d: each starts a run, approves its
// approval once requested and waits until the run finished, then starts
// the next.
func steadyWorkload(ctx context.Context, nc *nats.Conn, w *watcher, clients int, d time.Duration, prefix string) steady {
	c := api.NewClient(nc)
	var completed, failed atomic.Int64
	var mu sync.Mutex
	var lastErr error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%s-%d-%d", prefix, cl, i)
				if err := oneRun(ctx, c, w, id); err != nil {
					failed.Add(1)
					mu.Lock()
					lastErr = err
					mu.Unlock()
					continue
				}
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	return steady{completed: int(completed.Load()), failed: int(failed.Load()), elapsed: time.Since(start), lastErr: lastErr}
}

// oneRun starts run id, approves it and waits until it finished.
func oneRun(ctx context.Context, c *api.Client, w *watcher, id string) error {
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	defer w.forget(id)
	asked := w.expect(id, "approval_requested")
	done := w.expect(id, "run_finished")
	if _, err := c.Start(rctx, api.StartRequest{Run: id, Agent: AgentName, Input: input}); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	select {
	case <-asked:
	case <-rctx.Done():
		return fmt.Errorf("run %s: no approval request within a minute", id)
	}
	if err := approve(rctx, c, id, 1); err != nil {
		return fmt.Errorf("approve %s: %w", id, err)
	}
	select {
	case <-done:
		return nil
	case <-rctx.Done():
		return fmt.Errorf("run %s: not finished within a minute of its approval", id)
	}
}

// approveSample approves every run of sample (suspended on revision 1,
// or on the revision a takeover re-asked) and waits until each finished;
// it returns how many finished.
func approveSample(ctx context.Context, nc *nats.Conn, w *watcher, sample []string, limit time.Duration) (int, error) {
	c := api.NewClient(nc)
	var ok atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, run := range sample {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			done := w.expect(run, "run_finished")
			var err error
			for {
				err = approve(rctx, c, run, 1)
				if err == nil || rctx.Err() != nil || !weft.ErrorCode(err).Retryable() {
					break
				}
				// unavailable / runner busy while partitions move: again.
				time.Sleep(100 * time.Millisecond)
			}
			if err == nil {
				select {
				case <-done:
					ok.Add(1)
					return
				case <-rctx.Done():
					err = errors.New("not finished in time")
				}
			}
			mu.Lock()
			errs = append(errs, fmt.Errorf("run %s: %w", run, err))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return int(ok.Load()), errors.Join(errs...)
}
