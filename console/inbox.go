package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/proof"
)

// section is one kind of item that waits for a person. The inbox shows the
// sections in order; the run page shows each section's items of that run.
// A new kind (such as open questions) is one more implementation and one
// card template in assets/templates/partials.
type section interface {
	// load reads the section's items, of one run when run is not empty,
	// that pass the filter f (filter.go).
	load(ctx context.Context, run, ret string, f inboxFilter) sectionView
	// fingerprint identifies the section's current items (for the live
	// stream): it changes when an item appears, leaves or changes.
	fingerprint(ctx context.Context) (string, error)
}

// sectionView is a loaded section.
type sectionView struct {
	// ID is the section's anchor and DOM id ("approvals").
	ID string
	// Title, Help and Empty are its heading, one sentence on what its
	// items are and the text shown when it has none.
	Title, Help, Empty string
	// Cards are the rendered items.
	Cards []card
	// Err is why the section could not be read.
	Err *weft.Error
}

// filtered says that the filter f left out every item of an inbox section.
func (v *sectionView) filtered(f inboxFilter, none string) {
	if f.Active() {
		v.Empty = none
	}
}

// card is one rendered inbox item; Key is stable across renders (the live
// update keeps a card the viewer is working on).
type card struct {
	Key  string
	HTML template.HTML
}

// renderCard renders the partial template name with data.
func (c *Console) renderCard(name string, data any) template.HTML {
	var b bytes.Buffer
	if err := c.pages["inbox"].ExecuteTemplate(&b, name, data); err != nil {
		c.log.Error("console: render card", "template", name, "err", err)
		return template.HTML(`<p class="error">This item could not be shown.</p>`)
	}
	return template.HTML(b.String())
}

func asWeftError(err error) *weft.Error {
	var we *weft.Error
	if errors.As(err, &we) {
		return we
	}
	return &weft.Error{Code: weft.CodeInternal, Message: err.Error()}
}

func fingerprintOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// approvalCard is a pending approval request with its form.
type approvalCard struct {
	Item projections.ApprovalItem
	Key  string
	// Link is the card's shareable link (itemLink).
	Link      string
	Args      []field
	CommandID string
	// Approvers are the agent's approvers from the catalog (empty when
	// unknown: the form then has a text field); Approver is preselected.
	Approvers      []approverOption
	Approver       string
	CredentialHelp string
	Return         string
	ShowRun        bool
	// Signing is set when the preselected approver takes signed proofs.
	Signing bool
	// ArgumentsSHA256 is the hash of the call's canonical arguments a
	// signed proof states (proof.ArgumentsHash); NowMillis the console's
	// clock when the card was rendered, from which the page estimates the
	// runner's for the proof's expiry.
	ArgumentsSHA256 string
	NowMillis       int64
	// Approved are the edited arguments an earlier approve narrowed the
	// call to, readable (ApprovalItem.Approved), and ApprovedSHA256 their
	// hash, which a signed proof of an approve without a new edit states
	// (proof.Subject.WithApproved).
	Approved       []field
	ApprovedSHA256 string
	// RunsWith is the JSON of the arguments the call would run with if
	// approved as it stands (the approved ones, else the model's), indented:
	// the editable arguments of "Approve with changes" start from it.
	RunsWith string
	// RunsWithCompact is the same arguments compacted (proof.Canonical),
	// sent with the form (runs_with): an edit equal to them is none.
	RunsWithCompact string
	// Weft is the weft command that approves with edited arguments (the
	// arguments in it to edit), for the page without the script.
	Weft string
}

// approverOption is one approver of the form's choice; Lifetime, in
// seconds, is set for an approver of signed proofs.
type approverOption struct {
	Name     string
	Lifetime int
}

type approvalsSection struct{ c *Console }

func (s approvalsSection) load(ctx context.Context, run, ret string, f inboxFilter) sectionView {
	v := sectionView{ID: "approvals", Title: "Approvals waiting",
		Help:  "An action the policy wants a person to approve before it runs. Approve it, or reject it with a reason the model reads.",
		Empty: "No approval waits."}
	v.filtered(f, "No approval matches the filters.")
	items, err := s.c.client.Approvals(ctx, projector.InboxRequest{Run: run})
	if err != nil {
		v.Err = asWeftError(err)
		return v
	}
	now := time.Now()
	for _, it := range items {
		if !f.match(it.Run, it.Action, it.Tool, &it.Requirement, it.Requested, it.Arguments, now) {
			continue
		}
		key := "approval-" + projectionsKey(it.Run+"/"+it.Action)
		ac := approvalCard{Item: it, Key: key, Link: itemLink(it.Run, it.Action, key), Args: fields(it.Arguments), CommandID: newCommandID(),
			Approver: s.c.approver, CredentialHelp: s.c.credentialHelp, Return: ret, ShowRun: run == ""}
		ac.ArgumentsSHA256, _ = proof.ArgumentsHash(it.Arguments)
		runsWith := it.Arguments
		if it.Approved != nil {
			ac.Approved = fields(it.Approved)
			ac.ApprovedSHA256, _ = proof.ArgumentsHash(it.Approved)
			runsWith = it.Approved
		}
		ac.RunsWith = pretty(runsWith)
		compact, _ := proof.Canonical(runsWith)
		ac.RunsWithCompact = string(compact)
		ac.NowMillis = time.Now().UnixMilli()
		if e, err := s.c.entry(ctx, it.Agent); err == nil {
			for _, name := range e.Approvers {
				o := approverOption{Name: name}
				if sa, ok := e.SignedApprover(name); ok {
					o.Lifetime = max(sa.LifetimeSeconds, 1)
				}
				ac.Approvers = append(ac.Approvers, o)
			}
			if len(e.Approvers) > 0 && !contains(e.Approvers, ac.Approver) {
				ac.Approver = e.Approvers[0]
			}
			_, ac.Signing = e.SignedApprover(ac.Approver)
		}
		who := []string{"--credential", "YOUR_CREDENTIAL"}
		if ac.Signing {
			who = []string{"--signing-key", "YOUR_KEY.nk"}
		}
		ac.Weft = strings.Join(append([]string{"weft", "approve", shellQuote(it.Run), shellQuote(it.Action), "--revision", strconv.Itoa(it.Revision),
			"--approver", shellQuote(ac.Approver)}, append(who, "--args", shellQuote(string(compact)))...), " ")
		v.Cards = append(v.Cards, card{Key: key, HTML: s.c.renderCard("approval-card", ac)})
	}
	return v
}

func (s approvalsSection) fingerprint(ctx context.Context) (string, error) {
	items, err := s.c.client.Approvals(ctx, projector.InboxRequest{})
	return fingerprintOf(items), err
}

// uncertainCard is an uncertain effect with its reconciliation form.
type uncertainCard struct {
	Item      projections.UncertainItem
	Key       string
	Link      string
	Args      []field
	CommandID string
	Output    outputPart
	Return    string
	ShowRun   bool
}

type uncertainSection struct{ c *Console }

func (s uncertainSection) load(ctx context.Context, run, ret string, f inboxFilter) sectionView {
	v := sectionView{ID: "uncertain", Title: "Uncertain effects",
		Help:  "An action that may or may not have happened (a timeout after the request was sent, a lost worker). Find out, then record what happened: the tool's output, a failure, or unconfirmed with a note.",
		Empty: "No effect is uncertain."}
	v.filtered(f, "No uncertain effect matches the filters.")
	r, err := s.c.client.Uncertain(ctx, projector.InboxRequest{Run: run})
	if err != nil {
		v.Err = asWeftError(err)
		return v
	}
	now := time.Now()
	for _, it := range r.Items {
		if !f.match(it.Run, it.Action, it.Tool, nil, it.Since, it.Arguments, now) {
			continue
		}
		key := "uncertain-" + projectionsKey(it.Run+"/"+it.Action)
		uc := uncertainCard{Item: it, Key: key, Link: itemLink(it.Run, it.Action, key), Args: fields(it.Arguments), CommandID: newCommandID(), Return: ret, ShowRun: run == "",
			Output: outputPart{Key: key, Tool: it.Tool, Form: s.c.outputForm(ctx, it.Agent, it.Tool)}}
		v.Cards = append(v.Cards, card{Key: key, HTML: s.c.renderCard("uncertain-card", uc)})
	}
	return v
}

// outputForm is the form that records the output of tool of agent: from
// the tool's output schema in the catalog, else one JSON text area saying
// why.
func (c *Console) outputForm(ctx context.Context, agent events.AgentRef, tool string) outputForm {
	e, err := c.entry(ctx, agent)
	switch t, ok := e.Tool(tool); {
	case err != nil:
		return rawOutputForm("The tool's output schema is not available (" + asWeftError(err).Message + "): type the output as JSON.")
	case !ok || len(t.OutputSchema) == 0:
		return rawOutputForm("The catalog gives no output schema for " + tool + ": type the output as JSON.")
	default:
		return formFromSchema(t.OutputSchema)
	}
}

// outputPart is what the output-fields template gets: the card's key (for
// DOM ids), the tool and its output form.
type outputPart struct {
	Key, Tool string
	Form      outputForm
}

func (s uncertainSection) fingerprint(ctx context.Context) (string, error) {
	r, err := s.c.client.Uncertain(ctx, projector.InboxRequest{})
	for i := range r.Items {
		r.Items[i].AgeMillis = 0 // the age changes every time
	}
	return fingerprintOf(r.Items), err
}

// questionCard is an open question (an action reconciled as unconfirmed)
// with the form that records what finally happened.
type questionCard struct {
	Item      projections.QuestionItem
	Key       string
	Link      string
	Args      []field
	CommandID string
	Output    outputPart
	Return    string
	ShowRun   bool
}

// questionsSection is the open questions: actions reconciled as
// unconfirmed whose final truth nobody recorded yet (weft.api.resolve).
type questionsSection struct{ c *Console }

func (s questionsSection) load(ctx context.Context, run, ret string, f inboxFilter) sectionView {
	v := sectionView{ID: "questions", Title: "Open questions",
		Help:  "An effect recorded as unconfirmed: the run went on without knowing whether it happened. Once you know, record what finally happened. It is kept in the run's history for audit; the run does not change and the model is not told.",
		Empty: "No question is open."}
	v.filtered(f, "No open question matches the filters.")
	items, err := s.c.client.Questions(ctx, projector.InboxRequest{Run: run})
	if err != nil {
		v.Err = asWeftError(err)
		return v
	}
	now := time.Now()
	for _, it := range items {
		if !f.match(it.Run, it.Action, it.Tool, nil, it.Since, it.Arguments, now) {
			continue
		}
		key := "question-" + projectionsKey(it.Run+"/"+it.Action)
		qc := questionCard{Item: it, Key: key, Link: itemLink(it.Run, it.Action, key), Args: fields(it.Arguments), CommandID: newCommandID(), Return: ret, ShowRun: run == "",
			Output: outputPart{Key: key, Tool: it.Tool, Form: s.c.outputForm(ctx, it.Agent, it.Tool)}}
		v.Cards = append(v.Cards, card{Key: key, HTML: s.c.renderCard("question-card", qc)})
	}
	return v
}

func (s questionsSection) fingerprint(ctx context.Context) (string, error) {
	items, err := s.c.client.Questions(ctx, projector.InboxRequest{})
	return fingerprintOf(items), err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// catalogTTL is how long a catalog entry is reused before it is asked for
// again.
const catalogTTL = 30 * time.Second

type cached struct {
	entry catalog.Entry
	err   error
	at    time.Time
}

// entry returns the catalog entry of an agent, cached for catalogTTL (an
// unavailable catalog is asked again next time).
func (c *Console) entry(ctx context.Context, ref events.AgentRef) (catalog.Entry, error) {
	c.catMu.Lock()
	if e, ok := c.catCache[ref]; ok && time.Since(e.at) < catalogTTL {
		c.catMu.Unlock()
		return e.entry, e.err
	}
	c.catMu.Unlock()
	e, err := c.catalog.Agent(ctx, ref)
	var we *weft.Error
	if err != nil && errors.As(err, &we) && we.Code == weft.CodeUnavailable {
		return e, err
	}
	c.catMu.Lock()
	c.catCache[ref] = cached{entry: e, err: err, at: time.Now()}
	c.catMu.Unlock()
	return e, err
}

// inboxData is the inbox page's data.
type inboxData struct {
	Sections []sectionView
	Count    int
	// Filter is the page's filter (filter.go); FilterErr why it does not
	// parse (nothing is then shown).
	Filter    inboxFilter
	FilterErr *weft.Error
}

func (c *Console) inbox(w http.ResponseWriter, r *http.Request) {
	c.renderInbox(w, r, nil)
}

func (c *Console) renderInbox(w http.ResponseWriter, r *http.Request, fl *flash) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	live := c.liveQuery(ctx, url.Values{"watch": {"inbox"}})
	var d inboxData
	d.Filter, d.FilterErr = parseInboxFilter(r.URL.Query())
	status := http.StatusOK
	if d.FilterErr != nil {
		status = http.StatusBadRequest
	}
	ret := "/"
	if q := d.Filter.Query(); q != "" && d.FilterErr == nil {
		ret = "/?" + q
	}
	for _, s := range c.sections {
		if d.FilterErr != nil {
			break
		}
		v := s.load(ctx, "", ret, d.Filter)
		d.Count += len(v.Cards)
		d.Sections = append(d.Sections, v)
	}
	title := "Inbox"
	if d.Count > 0 {
		title = "Inbox (" + itoa(d.Count) + ")"
	}
	c.render(w, status, "inbox", page{Title: title, Nav: "inbox", Live: live, Flash: fl, Data: d})
}
