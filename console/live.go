package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// live streams server-sent events to an open page: "change" whenever the
// data the page shows changed (the page then fetches itself again and swaps
// the changed regions in), and a comment every 15 s to keep the stream
// open. It asks the query service every poll interval while the page is
// open; the watch parameter says what the page shows (watch=inbox,
// watch=runs with the list filters, watch=run&run=<id>).
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
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()

	// since is the fingerprint the page was rendered at: a change between
	// the render and this stream is reported at once.
	last, lastErr := v.Get("since"), false
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
		fp, err := probe(ctx)
		cancel()
		if r.Context().Err() != nil {
			return
		}
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
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case <-tick.C:
		}
	}
}

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
// fingerprint of what it shows now as "since".
func (c *Console) liveQuery(ctx context.Context, v url.Values) string {
	if fp, err := c.probe(v)(ctx); err == nil {
		v.Set("since", fp)
	}
	return v.Encode()
}
