package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// live streams server-sent events to an open page: "change" whenever the
// data the page shows changed (the page then fetches itself again and swaps
// the changed regions in), and a comment every 15 s to keep the stream
// open. The watch parameter says what the page shows (watch=inbox,
// watch=runs with the list filters, watch=run&run=<id>). Every stream of
// the same view shares one watch: the query service is asked once every
// poll interval per distinct view that some page has open, however many
// pages show it, and not at all once none does.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	v := r.URL.Query()
	probe := c.probe(v)
	if probe == nil {
		http.Error(w, "watch must be inbox, runs or run", http.StatusBadRequest)
		return
	}
	sub, ok := c.watches.join(watchKey(v), probe, c.poll, c.timeout)
	if !ok {
		// An EventSource does not reconnect after a refusal: the page
		// stays as it is and updates on reload.
		http.Error(w, "too many different pages are open live; reload to refresh", http.StatusServiceUnavailable)
		return
	}
	defer sub.leave()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()

	// seen is the fingerprint the page was rendered at: a change between
	// the render and this stream is reported at once. (Not "since": that
	// is the runs page's own "Changed since" filter, which the watch
	// keeps.)
	last, lastErr := v.Get(seenParam), false
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-sub.changed:
			fp, err := sub.state()
			switch {
			case err != nil && !lastErr:
				fmt.Fprintf(w, "event: trouble\ndata: %s\n\n", oneLineText(asWeftError(err).Message))
				lastErr = true
			case err == nil:
				if lastErr {
					fmt.Fprint(w, "event: ok\ndata: \n\n")
				}
				lastErr = false
				if fp != last {
					fmt.Fprintf(w, "event: change\ndata: %s\n\n", fp)
					last = fp
				}
			}
		}
		fl.Flush()
	}
}

// maxWatches bounds the distinct views watched at once (each costs one
// poll of the query service per interval); a stream beyond it is refused.
const maxWatches = 64

// seenParam is the live query's parameter for the fingerprint of what
// the page showed when it was rendered.
const seenParam = "seen"

// watchKey identifies what a live query watches: its parameters without
// the page's fingerprint (seenParam).
func watchKey(v url.Values) string {
	k := cloneValues(v)
	k.Del(seenParam)
	return k.Encode()
}

// watches are the views open pages watch, by watch key. A watch's
// goroutine polls its probe while the watch has subscribers and stops when
// the last one leaves.
type watches struct {
	mu sync.Mutex
	m  map[string]*watch
	wg sync.WaitGroup
}

// watch is one polled view.
type watch struct {
	key  string
	subs map[*subscription]struct{}
	// fp and err are the last poll's answer; polled is set once there is
	// one.
	fp     string
	err    error
	polled bool
	stop   context.CancelFunc
}

// subscription is one stream's share of a watch: changed gets a signal
// after each poll (a buffered channel of one: signals coalesce).
type subscription struct {
	ws      *watches
	w       *watch
	changed chan struct{}
}

// join subscribes to the watch of key, starting its poll when it is the
// first subscriber; false when maxWatches views are watched already.
func (ws *watches) join(key string, probe func(context.Context) (string, error), every, timeout time.Duration) (*subscription, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.m[key]
	if !ok {
		if len(ws.m) >= maxWatches {
			return nil, false
		}
		ctx, cancel := context.WithCancel(context.Background())
		w = &watch{key: key, subs: map[*subscription]struct{}{}, stop: cancel}
		if ws.m == nil {
			ws.m = map[string]*watch{}
		}
		ws.m[key] = w
		ws.wg.Add(1)
		go func() { defer ws.wg.Done(); ws.poll(ctx, w, probe, every, timeout) }()
	}
	s := &subscription{ws: ws, w: w, changed: make(chan struct{}, 1)}
	w.subs[s] = struct{}{}
	if w.polled {
		s.changed <- struct{}{}
	}
	return s, true
}

// poll asks probe every interval until ctx ends, and signals every
// subscriber after each answer.
func (ws *watches) poll(ctx context.Context, w *watch, probe func(context.Context) (string, error), every, timeout time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		fp, err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		ws.mu.Lock()
		w.fp, w.err, w.polled = fp, err, true
		for s := range w.subs {
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
		ws.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// state is the watch's last poll answer.
func (s *subscription) state() (string, error) {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	return s.w.fp, s.w.err
}

// leave ends the subscription; the last one stops the watch's poll.
func (s *subscription) leave() {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	delete(s.w.subs, s)
	if len(s.w.subs) == 0 {
		s.w.stop()
		delete(s.ws.m, s.w.key)
	}
}

// wait waits until every watch's poll has stopped (after every stream
// ended).
func (ws *watches) wait() { ws.wg.Wait() }

// inboxFingerprint identifies every section's items.
func (c *Console) inboxFingerprint(ctx context.Context) (string, error) {
	var parts []string
	for _, s := range c.sections {
		fp, err := s.fingerprint(ctx)
		if err != nil {
			return "", err
		}
		parts = append(parts, fp)
	}
	return strings.Join(parts, "."), nil
}

func oneLineText(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// probe returns the fingerprint function of a live query, nil for an
// unknown watch.
func (c *Console) probe(v url.Values) func(ctx context.Context) (string, error) {
	switch v.Get("watch") {
	case "inbox":
		return c.inboxFingerprint
	case "runs":
		return func(ctx context.Context) (string, error) { return c.runsFingerprint(ctx, v) }
	case "run":
		run := v.Get("run")
		return func(ctx context.Context) (string, error) { return c.runFingerprint(ctx, run) }
	}
	return nil
}

// liveQuery returns the live stream query of a page showing v: v with the
// fingerprint of what it shows now as seenParam.
func (c *Console) liveQuery(ctx context.Context, v url.Values) string {
	if fp, err := c.probe(v)(ctx); err == nil {
		v.Set(seenParam, fp)
	}
	return v.Encode()
}
