package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projector"
)

// lockedWriter serialises the writes of the printed steps and the feed.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// feed prints one line per event appended to the log while the demo runs,
// and remembers which runs were handed off last, for the line Run prints
// when it stops.
type feed struct {
	w   io.Writer
	log *eventlog.Log

	mu       sync.Mutex
	seq      uint64          // the last stream sequence printed
	handed   map[string]bool // runs whose last event is run_handed_off
	finished map[string]bool
	seen     map[string]bool // runs the feed printed an event of
}

// FeedLineWidth is the longest event line the feed prints; a longer
// Describe line is cut and ends with "…".
const FeedLineWidth = 160

// FeedLine is the line the demo prints for an event: its time, run,
// version and Describe line (cut to FeedLineWidth), and events.Note's
// explanation when there is one.
func FeedLine(env events.Envelope) string {
	desc := string(env.Type)
	ev, err := env.Event()
	if err == nil {
		desc = events.Describe(ev)
	}
	if len(desc) > FeedLineWidth {
		desc = desc[:FeedLineWidth] + "…"
	}
	line := fmt.Sprintf("%s  %s #%d  %s", env.Recorded.Local().Format("15:04:05.000"), env.Run, env.Version, desc)
	if err == nil {
		if n := events.Note(ev); n != "" {
			line += "   (" + n + ")"
		}
	}
	return line
}

// run prints the log from fromSeq until ctx ends.
func (f *feed) run(ctx context.Context, fromSeq uint64) error {
	return f.log.Subscribe(ctx, fromSeq, func(se eventlog.StreamEvent) error {
		if se.Poison != nil || se.Void != nil {
			if se.Poison != nil {
				fmt.Fprintf(f.w, "seq %d  %s\n", se.Seq, se.Poison.Error())
			} else {
				fmt.Fprintf(f.w, "seq %d  run %s: the message at seq %d voided (%s)\n", se.Seq, se.Run, se.Void.Seq, se.Void.Reason)
			}
			f.mu.Lock()
			f.seq = se.Seq
			f.mu.Unlock()
			return nil
		}
		fmt.Fprintln(f.w, FeedLine(se.Envelope))
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seq = se.Seq
		run := se.Envelope.Run
		f.seen[run] = true
		// A run stays handed off from its run_handed_off until a runner
		// recovers it (the view's HandedOff): the draining runner still
		// records the reports and model replies of the work in flight
		// after the hand-off, and they do not take it back.
		switch se.Envelope.Type {
		case events.NameRunHandedOff:
			f.handed[run] = true
		case events.NameRunRecovered:
			delete(f.handed, run)
		case events.NameRunFinished:
			f.finished[run] = true
			delete(f.handed, run)
		}
		return nil
	})
}

// caughtUp waits (up to ctx) until the feed printed the stream's last
// message.
func (f *feed) caughtUp(ctx context.Context, stream jetstream.Stream) {
	info, err := stream.Info(ctx)
	if err != nil {
		return
	}
	for {
		f.mu.Lock()
		seq := f.seq
		f.mu.Unlock()
		if seq >= info.State.LastSeq {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// handedOff lists the runs whose last event printed is run_handed_off.
func (f *feed) handedOff() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for r := range f.handed {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// waiting lists the runs the feed printed events of that neither
// finished nor were handed off: with partitioned runners such a run
// waits only for people (an idle run, out of memory: ADR 0019), since
// the drain hands off every run with work in flight.
func (f *feed) waiting() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for r := range f.seen {
		if !f.finished[r] && !f.handed[r] {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// idleRuns are the runs waiting lists (feed.waiting), by what each waits
// for (feed.idle).
type idleRuns struct {
	// person: an approval asked, or an uncertain effect to reconcile;
	// settlement: a settling action's window is open; other: neither of
	// them (a child run, say); unread: the history could not be read
	// within its time, so what it waits for is not known.
	person, settlement, other, unread []string
}

// idle sorts the runs waiting lists by what each waits for, read from its
// history in the log, each within per of its own (ctx bounds them all), so
// that one slow read leaves no other run unread.
func (f *feed) idle(ctx context.Context, waiting []string, per time.Duration) idleRuns {
	var ir idleRuns
	for _, run := range waiting {
		rctx, cancel := context.WithTimeout(ctx, per)
		kind, err := waitsFor(rctx, f.log, run)
		cancel()
		switch {
		case err != nil:
			ir.unread = append(ir.unread, run)
		case kind == waitPerson:
			ir.person = append(ir.person, run)
		case kind == waitSettlement:
			ir.settlement = append(ir.settlement, run)
		default:
			ir.other = append(ir.other, run)
		}
	}
	return ir
}

type waitKind int

const (
	waitOther waitKind = iota
	waitPerson
	waitSettlement
)

// waitsFor folds run's history and says what it waits for; a person
// first, when it waits for both. An error: the history could not be read.
func waitsFor(ctx context.Context, log *eventlog.Log, run string) (waitKind, error) {
	envs, _, err := log.Load(ctx, run)
	if err != nil {
		return waitOther, err
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		rec, err := projector.Recorded(env)
		if err != nil {
			return waitOther, err
		}
		recs = append(recs, rec)
	}
	kind := waitOther
	for _, a := range aggregate.Fold(recs).Actions() {
		switch a.State {
		case aggregate.ActionAwaitingApproval, aggregate.ActionUncertain:
			return waitPerson, nil
		case aggregate.ActionSettling:
			kind = waitSettlement
		}
	}
	return kind, nil
}

// stopLine is what Run prints when it stopped cleanly: the runs handed
// off (work was in flight), and the idle runs, which needed no hand-off:
// those that wait for a person, those that wait for a settlement, the
// others and those that could not be read; the next weft dev on the same
// store continues them all.
func stopLine(handed []string, ir idleRuns, store string) string {
	where := "the next weft dev on this store"
	if store != "" {
		where = "the next weft dev on " + store
	}
	line := "Stopped: no run was in flight; nothing handed off."
	if len(handed) > 0 {
		runs, them := runList(handed)
		line = fmt.Sprintf("Stopped: handed off %s; %s (or any runner on the same NATS) continues %s, and approvals already given stay valid.", runs, where, them)
	}
	idle := func(runs []string, what, when string) {
		if len(runs) == 0 {
			return
		}
		list, them := runList(runs)
		verb := "waits"
		if len(runs) > 1 {
			verb = "wait"
		}
		line += fmt.Sprintf(" %s %s%s: %s (or any runner on the same NATS) continues %s%s.", upper(list), verb, what, where, them, when)
	}
	idle(ir.person, " for a person", " when answered")
	idle(ir.settlement, " for a settlement", " when it comes, or when its window closes")
	idle(ir.other, " with nothing in flight", "")
	if len(ir.unread) > 0 {
		list, them := runList(ir.unread)
		what := "what it waits for is"
		if len(ir.unread) > 1 {
			what = "what they wait for is"
		}
		line += fmt.Sprintf(" %s could not be read now, so %s not said (see weft show): %s (or any runner on the same NATS) continues %s.", upper(list), what, where, them)
	}
	return line
}

// runList names runs for stopLine: "run a" or "2 runs (a, b)", and the
// pronoun for them.
func runList(runs []string) (string, string) {
	if len(runs) == 1 {
		return "run " + runs[0], "it"
	}
	return fmt.Sprintf("%d runs (%s)", len(runs), strings.Join(runs, ", ")), "them"
}

// upper capitalises the first letter of s (ASCII).
func upper(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
