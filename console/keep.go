package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
)

// restartForm is the run page's "Restart from a step" form of a finished
// run (docs/semantics.md §14): the model turns it may restart from, its
// first own turn (1, or a restarted run's fork point) up to its last
// turn + 1 (which continues after the whole run). Run is the new run's id
// chosen when the form is rendered: every send of one form with no run id
// typed names this one run, so that two sends in flight (a double click)
// restart once.
type restartForm struct {
	CommandID string
	Run       string
	From      string
	Turns     []int64
	Last      int64
}

func newRestartForm(v projections.RunView) restartForm {
	f := restartForm{CommandID: newCommandID(), Run: newRunID(), From: v.Run, Last: v.Turns}
	// A restarted run's turns continue its parent's numbering, and a turn
	// before its own fork point is refused wrong_reference (its log has
	// no such turn, docs/semantics.md §14): it offers none.
	first := int64(1)
	if v.ForkedFrom != nil && v.ForkedFrom.Turn > first {
		first = v.ForkedFrom.Turn
	}
	for t := first; t <= v.Turns+1; t++ {
		f.Turns = append(f.Turns, t)
	}
	return f
}

// holdRow is a legal hold of the run page, with the command id of its
// release form (Hold.CommandID is the command that placed it).
type holdRow struct {
	retention.Hold
	ReleaseCommandID string
}

// holdsWait bounds the read of a run's holds on a page: the page is
// shown without them (saying so) rather than late.
const holdsWait = 2 * time.Second

// holds reads the run's legal holds (retention.HoldsOf). The error says
// why they are not known: never read as "the run has none".
func (c *Console) holds(ctx context.Context, run string) ([]holdRow, error) {
	if c.holdsDenied.Load() {
		return nil, errors.New("the console's credentials may not read " + retention.HoldsBucket)
	}
	ctx, cancel := context.WithTimeout(ctx, holdsWait)
	defer cancel()
	// A refused read ends at the server's refusal, not at holdsWait.
	ctx, stop := c.violations.Watch(ctx, func(_, subject string) bool {
		return api.JetStreamSubject(subject) && strings.Contains(subject, retention.HoldsBucket)
	})
	defer stop()
	hs, err := retention.HoldsOf(ctx, c.js, run)
	if err != nil {
		if api.DeniedBy(ctx) != nil || errors.Is(err, nats.ErrPermissionViolation) {
			c.holdsDenied.Store(true)
			return nil, errors.New("the console's credentials may not read " + retention.HoldsBucket)
		}
		return nil, err
	}
	out := make([]holdRow, 0, len(hs))
	for _, h := range hs {
		out = append(out, holdRow{Hold: h, ReleaseCommandID: newCommandID()})
	}
	return out, nil
}

// actRestart restarts a finished run from one of its model turns as a new
// run (weft.api.restart, docs/semantics.md §14).
func (c *Console) actRestart(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	from := f.Get("from")
	turn, err := strconv.ParseInt(f.Get("turn"), 10, 64)
	if err != nil || turn < 1 {
		c.respond(w, r, notSent("Choose the model turn to restart from."))
		return
	}
	// A form without a run id typed sends the one chosen when it was
	// rendered (default_run): every send of the form, two in flight
	// included, names one run, so that with its command id it restarts at
	// most once. A request without either gets one here, named in an
	// answer whose outcome is not known.
	run := strings.TrimSpace(f.Get("run"))
	if run == "" {
		run = strings.TrimSpace(f.Get("default_run"))
	}
	if run == "" {
		run = newRunID()
	}
	// Who restarts it (docs/security.md, "Who did it"): the proof states
	// the parent, the turn and the new run (proof.RestartSubject).
	pc, ok := c.readPerson(w, r, proof.RestartSubject(from, turn, run, strings.TrimSpace(f.Get("reason"))))
	if !ok {
		return
	}
	by := strings.TrimSpace(f.Get("by"))
	rep, err := c.client.Restart(ctx, api.RestartRequest{CommandID: f.Get("command_id"), Run: run, From: api.RestartFrom{Run: from, Turn: turn}, Reason: pc.s.Reason, By: by, Proof: pc.proof})
	if err != nil {
		a := c.personRefused(r, pc, err, run, "")
		if a.Unknown {
			a.Run = run
		}
		c.respond(w, r, a)
		return
	}
	c.log.Info("console: restarted", "from", from, "turn", turn, "run", rep.Run)
	c.respond(w, r, answer{OK: true, Status: rep.Status, Link: runLink(rep.Run), Message: "Restarted run " + from + " from turn " + strconv.FormatInt(turn, 10) + " as run " + rep.Run + whoSent(by, pc) + "."})
}

// whoSent says who a person's command pc was sent as: ", signed with key
// K" or " by NAME (unverified)" ("" naming nobody).
func whoSent(by string, pc personCommand) string {
	switch {
	case pc.proof != nil:
		return ", signed with key " + pc.proof.Key
	case by != "":
		return " by " + by + " (unverified)"
	}
	return ""
}

// holdWho says who placed or released a hold, as the runner recorded it:
// "NAME (verified, key K)" or "NAME (unverified)".
func holdWho(by string, verified bool, key string) string {
	return strings.TrimPrefix(projections.PersonView{By: by, Verified: verified, Key: key}.Describe(), "by ")
}

// actHold places a legal hold on a run (weft.api.hold): retention keeps
// the run and its family until it is released (docs/security.md,
// "Retention and legal hold"). The name typed is recorded unverified; a
// hold signed with a person key (proof.HoldSubject) records the key's
// holder, verified (docs/security.md, "Who did it").
func (c *Console) actHold(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	run, reason, by := f.Get("run"), strings.TrimSpace(f.Get("reason")), strings.TrimSpace(f.Get("by"))
	pc, ok := c.readPerson(w, r, proof.HoldSubject(run, reason))
	if !ok {
		return
	}
	if reason == "" || (by == "" && pc.proof == nil) {
		c.respond(w, r, notSent("Type why the run is held and who holds it (or sign it with your key): the hold records both."))
		return
	}
	rep, err := c.client.Hold(ctx, api.HoldRequest{CommandID: f.Get("command_id"), Run: run, Reason: reason, By: by, Proof: pc.proof})
	if err != nil {
		c.respond(w, r, c.personRefused(r, pc, err, run, ""))
		return
	}
	c.log.Info("console: held", "run", run, "hold", rep.Hold)
	c.respond(w, r, answer{OK: true, Link: runLink(run) + "#holds", Message: "Hold " + rep.Hold + " placed on run " + run + " by " + holdWho(rep.By, rep.Verified, rep.Key) + ": retention keeps the run and its family until it is released."})
}

// actReleaseHold releases one of a run's legal holds
// (weft.api.release_hold).
func (c *Console) actReleaseHold(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	run, hold, reason, by := f.Get("run"), strings.TrimSpace(f.Get("hold")), strings.TrimSpace(f.Get("reason")), strings.TrimSpace(f.Get("by"))
	if hold == "" && (f.Get("prepare") != "" || strings.TrimSpace(f.Get("proof")) != "") {
		// Its proof states the hold (proof.ReleaseHoldSubject): the
		// command API refuses a signed release that names none.
		c.respond(w, r, notSent("Type the hold to release (h1, h2, …): a signed release names its hold."))
		return
	}
	pc, ok := c.readPerson(w, r, proof.ReleaseHoldSubject(run, hold, reason))
	if !ok {
		return
	}
	if reason == "" || (by == "" && pc.proof == nil) {
		c.respond(w, r, notSent("Type why the hold is released and who releases it (or sign it with your key): the release records both."))
		return
	}
	rep, err := c.client.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: f.Get("command_id"), Run: run, Hold: hold, Reason: reason, By: by, Proof: pc.proof})
	if err != nil {
		c.respond(w, r, c.personRefused(r, pc, err, run, ""))
		return
	}
	c.log.Info("console: released hold", "run", run, "hold", rep.Hold)
	released := holdWho(by, false, "")
	if rl := rep.Released; rl != nil {
		released = holdWho(rl.By, rl.Verified, rl.Key)
	}
	c.respond(w, r, answer{OK: true, Link: runLink(run) + "#holds", Message: "Hold " + rep.Hold + " of run " + run + " released by " + released + "."})
}
