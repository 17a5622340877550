package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// runData is the run page's data.
type runData struct {
	View   projections.RunView
	Family projections.Family
	// Outcome is the outcome's details (events.DescribeOutcome) without
	// its answer, which Answer holds as text: a JSON string's text, any
	// other JSON as indented JSON (never escaped JSON in a line).
	Outcome string
	Answer  string
	// FamilyDiffers is set when the family status says more than the
	// run's own status.
	FamilyDiffers bool
	Waiting       []sectionView
	WaitingCount  int
	Actions       []actionRow
	Transcript    []message
	Timeline      []line
	Children      []childRow
	Audit         auditPanel
	// HistoryErr is why the history (transcript, timeline, audit) could
	// not be read.
	HistoryErr *weft.Error
	Cancel     cancelForm
	// Pause is the form that pauses the run, or resumes it when it is
	// paused (docs/semantics.md §13).
	Pause cancelForm
	// Restart is the form that restarts a finished run from a step
	// (docs/semantics.md §14); Forks are the runs restarted from this one.
	Restart restartForm
	Forks   []projector.Fork
	// Holds are the run's legal holds, active and released; HoldsErr is
	// why they are not known (the forms still place and release them).
	Holds    []holdRow
	HoldsErr string
	Hold     cancelForm
	// Release is the release form's when the holds are not known.
	Release cancelForm
}

type cancelForm struct {
	CommandID string
	Run       string
}

// actionRow is one action of the run view, readable.
type actionRow struct {
	projections.ActionView
	Args []field
	// Approved are the edited arguments an approver narrowed the call to
	// (docs/semantics.md §4, "Approving narrower arguments"), readable;
	// empty when nobody edited the call.
	Approved []field
	// Result is the content the model read, readable.
	ResultFields []field
}

// message is one transcript entry.
type message struct {
	Role  string
	Text  string
	Calls []call
	// Results are a tool batch's results, in call order.
	Results []result
}

type call struct {
	ID, Name string
	Args     []field
	Action   string
}

type result struct {
	CallID, Name string
	Content      []field
}

// line is one timeline entry: what `weft events` prints for an event.
type line struct {
	Version  uint64
	Recorded time.Time
	Type     string
	Text     string
}

type childRow struct {
	projections.ChildView
	Status, FamilyStatus string
	OutcomeText          string
}

// auditPanel is the result of audit.Verify on the history the query
// service returned.
type auditPanel struct {
	Report audit.Report
	// ViewCompared is set when the stored view was at the history's head
	// and was compared byte for byte.
	ViewCompared bool
	ViewNote     string
	Head         eventlog.Head
	// Questions are the open questions the history records (actions
	// reconciled as unconfirmed) and their resolutions, in log order.
	Questions []questionAudit
	// Credentials is set when an answer was given by an approver with a
	// credential (no signed proof to check again).
	Credentials bool
}

// questionAudit is an open question as the verified history records it:
// the reconciliation that opened it and the resolution, once recorded.
type questionAudit struct {
	Action string
	// Opened is the version and time of the unconfirmed reconciliation,
	// Note its note, By who recorded it (verified or not, as the history
	// proves it: projections.Deeds).
	Opened     uint64
	OpenedAt   time.Time
	Note       string
	By         projections.PersonView
	Resolved   bool
	ResolvedAt time.Time
	ResolvedIn uint64
	Kind       string
	Content    []field
	// ResolvedBy is who recorded the resolution, as By.
	ResolvedBy projections.PersonView
}

// answeredWithCredential reports whether an answer of the history was
// verified by an approver without a signed proof.
func answeredWithCredential(envs []events.Envelope) bool {
	for _, env := range envs {
		if env.Type != events.NameApprovalAnswered {
			continue
		}
		if ev, err := env.Event(); err == nil {
			if a, ok := ev.(events.ApprovalAnswered); ok && a.Verifier != "" && a.Proof == nil {
				return true
			}
		}
	}
	return false
}

// questionsOf lists the open questions of a history and their
// resolutions (events reconciled with kind unconfirmed, then resolved).
func questionsOf(envs []events.Envelope) []questionAudit {
	var out []questionAudit
	index := map[string]int{}
	var recs []events.Recorded
	for _, env := range envs {
		if ev, err := env.Event(); err == nil {
			recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
		}
	}
	who := map[uint64]projections.PersonView{}
	for _, d := range projections.Deeds(recs) {
		who[d.Version] = d.Who
	}
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			continue // the audit's verdict names an undecodable event
		}
		switch e := ev.(type) {
		case events.Reconciled:
			if e.Kind != events.ReconciledUnconfirmed {
				continue
			}
			var note struct {
				Unconfirmed string `json:"unconfirmed"`
			}
			_ = json.Unmarshal(e.Content, &note)
			index[e.Action] = len(out)
			out = append(out, questionAudit{Action: e.Action, Opened: env.Version, OpenedAt: env.Recorded, Note: note.Unconfirmed, By: who[env.Version]})
		case events.Resolved:
			i, ok := index[e.Action]
			if !ok {
				continue
			}
			q := &out[i]
			q.Resolved, q.ResolvedIn, q.ResolvedAt, q.Kind, q.ResolvedBy = true, env.Version, env.Recorded, e.Kind, who[env.Version]
			q.Content = fields(e.Content)
		}
	}
	return out
}

func (c *Console) run(w http.ResponseWriter, r *http.Request) { c.renderRun(w, r, nil) }

func (c *Console) renderRun(w http.ResponseWriter, r *http.Request, fl *flash) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	id := r.PathValue("run")
	live := c.liveQuery(ctx, url.Values{"watch": {"run"}, "run": {id}})
	rep, err := c.client.RunFamily(ctx, id)
	if err != nil {
		we := asWeftError(err)
		status := http.StatusServiceUnavailable
		switch we.Code {
		case weft.CodeUnknownRun:
			status = http.StatusNotFound
		case weft.CodeInvalidName:
			status = http.StatusBadRequest
		}
		c.render(w, status, "error", page{Title: "Run " + id, Nav: "runs", Flash: fl, Data: errorData{Title: "Run " + id, Err: we}})
		return
	}
	v := rep.View
	d := runData{View: v, Family: rep.FamilyStatus, FamilyDiffers: rep.FamilyStatus.Status != v.Status || len(rep.FamilyStatus.Waiting) > 0,
		Cancel: cancelForm{CommandID: newCommandID(), Run: v.Run}, Pause: cancelForm{CommandID: newCommandID(), Run: v.Run},
		Restart: newRestartForm(v), Forks: rep.Forks, Hold: cancelForm{CommandID: newCommandID(), Run: v.Run},
		Release: cancelForm{CommandID: newCommandID(), Run: v.Run}}
	// A live refresh replaces only the live regions, and the holds are
	// not one (they change only through the page's own forms, after
	// which app.js reads the page again): it does not read them.
	if r.Header.Get("X-Weft-Live") != "" {
		d.HoldsErr = "not read on a live refresh"
	} else if hs, err := c.holds(ctx, v.Run); err != nil {
		d.HoldsErr = err.Error()
	} else {
		d.Holds = hs
	}
	if v.Outcome != nil {
		o := *v.Outcome
		d.Answer = answerText(o.Answer)
		o.Answer = nil
		d.Outcome = events.DescribeOutcome(o)
	}
	ret := "/runs/" + url.PathEscape(v.Run)
	if v.Status != "finished" || len(v.Uncertain) > 0 || len(v.Questions) > 0 {
		for _, s := range c.sections {
			sv := s.load(ctx, v.Run, ret, inboxFilter{})
			d.WaitingCount += len(sv.Cards)
			d.Waiting = append(d.Waiting, sv)
		}
	}
	for _, a := range v.Actions {
		row := actionRow{ActionView: a, Args: fields(a.Arguments)}
		if a.Approved != nil {
			row.Approved = fields(a.Approved)
		}
		if a.Result != "" {
			row.ResultFields = fields(json.RawMessage(a.Result))
		}
		d.Actions = append(d.Actions, row)
	}
	for i, ch := range v.Children {
		row := childRow{ChildView: ch}
		if i < len(rep.ChildStatus) && rep.ChildStatus[i].Run == ch.Run {
			row.Status = rep.ChildStatus[i].Status
			if f := rep.ChildStatus[i].FamilyStatus; f != nil {
				row.FamilyStatus = f.Status
			}
		}
		if ch.Outcome != nil {
			row.OutcomeText = events.DescribeOutcome(*ch.Outcome)
		}
		d.Children = append(d.Children, row)
	}
	envs, head, err := c.history(ctx, v.Run)
	if err != nil {
		d.HistoryErr = asWeftError(err)
	} else {
		d.Transcript, d.Timeline = transcript(envs), timeline(envs)
		d.Audit = verify(envs, head, v, rep.Projected)
	}
	c.render(w, http.StatusOK, "run", page{Title: "Run " + v.Run + " (" + v.Status + ")", Nav: "runs",
		Live: live, Flash: fl, Data: d})
}

// history reads a run's whole history through the query service.
func (c *Console) history(ctx context.Context, run string) ([]events.Envelope, eventlog.Head, error) {
	var out []events.Envelope
	var after uint64
	for {
		h, err := c.client.History(ctx, projector.HistoryRequest{Run: run, After: after, Limit: projector.MaxHistoryLimit})
		if err != nil {
			return nil, eventlog.Head{}, err
		}
		out = append(out, h.Events...)
		if h.Next == 0 {
			return out, h.Head, nil
		}
		after = h.Next
	}
}

func recorded(envs []events.Envelope) ([]events.Recorded, error) {
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			return nil, fmt.Errorf("event %d (%s): %w", env.Version, env.Type, err)
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return recs, nil
}

// transcript is the run's conversation as the model saw it
// (aggregate.Transcript of the refolded history); nil when the history does
// not decode (the audit panel says why).
func transcript(envs []events.Envelope) []message {
	recs, err := recorded(envs)
	if err != nil {
		return nil
	}
	var msgs []events.Message
	func() {
		defer func() { _ = recover() }() // an impossible history: the audit panel reports it
		msgs = aggregate.Transcript(aggregate.Fold(recs))
	}()
	out := make([]message, 0, len(msgs))
	for _, m := range msgs {
		e := message{Role: string(m.Role), Text: m.Text}
		for _, cl := range m.Calls {
			e.Calls = append(e.Calls, call{ID: cl.ID, Name: cl.Name, Args: fields(cl.Arguments)})
		}
		for _, res := range m.Results {
			e.Results = append(e.Results, result{CallID: res.CallID, Name: res.Name, Content: fields(res.Content)})
		}
		out = append(out, e)
	}
	return out
}

// timeline is one line per event, as `weft events` prints it.
func timeline(envs []events.Envelope) []line {
	out := make([]line, 0, len(envs))
	for _, env := range envs {
		l := line{Version: env.Version, Recorded: env.Recorded, Type: string(env.Type)}
		if ev, err := env.Event(); err != nil {
			l.Text = fmt.Sprintf("%s (undecodable: %v)", env.Type, err)
		} else {
			l.Text = events.Describe(ev)
		}
		out = append(out, l)
	}
	return out
}

// verify runs the checks of `weft audit verify` on the history: the chain
// against the head the query service reported, the refold, the projection,
// and the stored view when it is at the history's head (projected is the
// stored view's version; the query answers a view folded to the log's head
// while the projector catches up, and that one is not the stored view).
func verify(envs []events.Envelope, head eventlog.Head, v projections.RunView, projected uint64) auditPanel {
	p := auditPanel{Head: head}
	opts := []audit.Option{audit.WithHead(head.Hash)}
	stored := v
	stored.Version = projected
	if lag := projector.Lag(stored, head); lag != "" {
		p.ViewNote = lag + ": view not compared"
	} else if v.Version == head.Version && projected == head.Version {
		if b, err := v.Encode(); err == nil {
			opts = append(opts, audit.WithView(b))
			p.ViewCompared = true
		}
	}
	p.Report = audit.Verify(envs, opts...)
	p.Questions = questionsOf(envs)
	p.Credentials = answeredWithCredential(envs)
	return p
}

// runFingerprint identifies what a run page shows: the view's version and
// the family and child statuses.
func (c *Console) runFingerprint(ctx context.Context, run string) (string, error) {
	rep, err := c.client.RunFamily(ctx, run)
	return fingerprintOf([]any{rep.View.Version, rep.FamilyStatus, rep.ChildStatus}), err
}

// errorData is the data of a page that could not be shown.
type errorData struct {
	Title string
	Err   *weft.Error
}

// answerText is a run's answer as a person reads it: a JSON string's
// text, any other JSON indented; "" for none.
func answerText(a json.RawMessage) string {
	if len(a) == 0 || string(a) == "null" {
		return ""
	}
	var text string
	if json.Unmarshal(a, &text) == nil {
		return text
	}
	var b bytes.Buffer
	if json.Indent(&b, a, "", "  ") != nil {
		return string(a)
	}
	return b.String()
}
