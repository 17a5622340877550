package projections

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Summary is one run as the lists show it; it is stored in the weft_runs
// bucket under the run id.
type Summary struct {
	Schema    int             `json:"schema"`
	Run       string          `json:"run"`
	Agent     events.AgentRef `json:"agent"`
	Status    string          `json:"status"`
	Outcome   string          `json:"outcome,omitempty"`
	Approvals int             `json:"approvals"`
	Uncertain int             `json:"uncertain"`
	Questions int             `json:"questions,omitempty"`
	Turns     int64           `json:"turns"`
	Version   uint64          `json:"version"`
	Started   time.Time       `json:"started"`
	Updated   time.Time       `json:"updated"`
}

// Summarize returns the list entry of v.
func Summarize(v RunView) Summary {
	s := Summary{
		Schema: 1, Run: v.Run, Agent: v.Agent, Status: v.Status,
		Approvals: len(v.Approvals), Uncertain: len(v.Uncertain), Questions: len(v.Questions),
		Turns: v.Turns, Version: v.Version, Started: v.Started, Updated: v.Updated,
	}
	if v.Outcome != nil {
		s.Outcome = v.Outcome.Kind
	}
	return s
}

// ApprovalItem is one pending approval request of the approvals inbox; it is
// stored in the weft_inbox_approvals bucket under ItemKey(run, action).
type ApprovalItem struct {
	Schema      int                `json:"schema"`
	Run         string             `json:"run"`
	Agent       events.AgentRef    `json:"agent"`
	Action      string             `json:"action"`
	Tool        string             `json:"tool"`
	Arguments   json.RawMessage    `json:"arguments"`
	Revision    int                `json:"revision"`
	Requirement events.Requirement `json:"requirement"`
	Requested   time.Time          `json:"requested"`
	Expires     *time.Time         `json:"expires,omitempty"`
	// Approved are the edited arguments an earlier approve narrowed the
	// call to and an attempt ran with (ActionView.Approved): a request
	// re-asked after that lost attempt approves the call as it ran, with
	// them.
	Approved json.RawMessage `json:"approved_arguments,omitempty"`
}

// UncertainItem is one action whose effect is uncertain; it is stored in the
// weft_inbox_uncertain bucket under ItemKey(run, action). AgeMillis is
// filled by Aged at query time (stored as 0).
type UncertainItem struct {
	Schema    int             `json:"schema"`
	Run       string          `json:"run"`
	Agent     events.AgentRef `json:"agent"`
	Action    string          `json:"action"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Evidence  string          `json:"evidence"`
	Since     time.Time       `json:"since"`
	Finished  bool            `json:"run_finished"`
	AgeMillis int64           `json:"age_ms"`
}

// QuestionItem is one open question of the open-questions read model: an
// action reconciled as unconfirmed ({"unconfirmed": note}: its effect may
// or may not have happened, and the run went on) whose final truth nobody
// has recorded yet. It is stored in the weft_open_questions bucket under
// ItemKey(run, action) until the action is resolved (weft.api.resolve).
type QuestionItem struct {
	Schema    int             `json:"schema"`
	Run       string          `json:"run"`
	Agent     events.AgentRef `json:"agent"`
	Action    string          `json:"action"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Note is the unconfirmed note; Evidence why the effect was uncertain.
	Note     string `json:"note"`
	Evidence string `json:"evidence,omitempty"`
	// By is who reconciled it; Since when.
	By    string    `json:"by,omitempty"`
	Since time.Time `json:"since"`
	// Finished says whether the run has finished.
	Finished bool `json:"run_finished"`
}

// QuestionItems returns the open questions of v, in action order.
func QuestionItems(v RunView) []QuestionItem {
	var out []QuestionItem
	for _, a := range v.Actions {
		if a.State != StateReconciled || !a.Question.Open() {
			continue
		}
		out = append(out, QuestionItem{
			Schema: 1, Run: v.Run, Agent: v.Agent, Action: a.ID, Tool: a.Tool, Arguments: a.Arguments,
			Note: a.Question.Note, Evidence: a.Evidence, By: a.Question.By, Since: a.Question.Since,
			Finished: v.Status == StatusFinished,
		})
	}
	return out
}

// SortQuestions sorts items oldest question first.
func SortQuestions(items []QuestionItem) {
	slices.SortFunc(items, func(a, b QuestionItem) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return compareKey(a.Run, a.Action, b.Run, b.Action)
	})
}

// ApprovalItems returns the pending approval requests of v, in action order.
func ApprovalItems(v RunView) []ApprovalItem {
	var out []ApprovalItem
	for _, a := range v.Actions {
		if a.State != StateAwaitingApproval || a.Pending == nil {
			continue
		}
		out = append(out, ApprovalItem{
			Schema: 1, Run: v.Run, Agent: v.Agent, Action: a.ID, Tool: a.Tool, Arguments: a.Arguments,
			Revision: a.Pending.Revision, Requirement: a.Pending.Requirement,
			Requested: a.Pending.Requested, Expires: a.Pending.Expires, Approved: a.Approved,
		})
	}
	return out
}

// UncertainItems returns the uncertain actions of v, in action order.
func UncertainItems(v RunView) []UncertainItem {
	var out []UncertainItem
	for _, a := range v.Actions {
		if a.State != StateUncertain {
			continue
		}
		it := UncertainItem{
			Schema: 1, Run: v.Run, Agent: v.Agent, Action: a.ID, Tool: a.Tool, Arguments: a.Arguments,
			Evidence: a.Evidence, Finished: v.Status == StatusFinished,
		}
		if a.UncertainSince != nil {
			it.Since = *a.UncertainSince
		}
		out = append(out, it)
	}
	return out
}

// Aged returns items sorted oldest first with AgeMillis computed at now.
func Aged(items []UncertainItem, now time.Time) []UncertainItem {
	out := slices.Clone(items)
	for i := range out {
		out[i].AgeMillis = max(now.Sub(out[i].Since).Milliseconds(), 0)
	}
	slices.SortFunc(out, func(a, b UncertainItem) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return compareKey(a.Run, a.Action, b.Run, b.Action)
	})
	return out
}

// SortApprovals sorts items oldest request first.
func SortApprovals(items []ApprovalItem) {
	slices.SortFunc(items, func(a, b ApprovalItem) int {
		if c := a.Requested.Compare(b.Requested); c != 0 {
			return c
		}
		return compareKey(a.Run, a.Action, b.Run, b.Action)
	})
}

func compareKey(r1, a1, r2, a2 string) int {
	if c := strings.Compare(r1, r2); c != 0 {
		return c
	}
	return strings.Compare(a1, a2)
}

// ItemKey is the KV key of an inbox item: the run id, a dot and the action id
// with every byte outside [A-Za-z0-9_-] written as "=XX" (hex), so that
// "12/call_1" becomes "12=2Fcall_1".
func ItemKey(run, action string) string {
	var b strings.Builder
	b.WriteString(run)
	b.WriteByte('.')
	for i := 0; i < len(action); i++ {
		c := action[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteString("=" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)+strconv.FormatUint(uint64(c)&15, 16)))
	}
	return b.String()
}

// ListQuery filters and pages the run list. Zero fields do not filter.
type ListQuery struct {
	// Status is one of Statuses(), or "".
	Status string `json:"status,omitempty"`
	// Agent is an agent name, or "".
	Agent string `json:"agent,omitempty"`
	// UpdatedSince keeps runs changed at or after it (RFC 3339), or "".
	UpdatedSince string `json:"updated_since,omitempty"`
	// Limit is the page size, 1..1000; 0 means 50.
	Limit int `json:"limit,omitempty"`
	// Cursor is the Next of the previous page, or "".
	Cursor string `json:"cursor,omitempty"`
}

// ListPage is one page of runs, most recently changed first. Next is the
// cursor of the following page, empty on the last one.
type ListPage struct {
	Schema int       `json:"schema"`
	Runs   []Summary `json:"runs"`
	Next   string    `json:"next,omitempty"`
}

// The bounds of ListQuery.Limit.
const (
	// DefaultLimit is the page size when ListQuery.Limit is 0.
	DefaultLimit = 50
	// MaxLimit is the largest page size.
	MaxLimit = 1000
)

var nameGrammar = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidRunID reports whether id follows the run id grammar: 1–128 of
// [A-Za-z0-9_-].
func ValidRunID(id string) bool { return nameGrammar.MatchString(id) }

// Page filters all (in any order) by q and returns the page q asks for,
// ordered by last change, newest first, then run id. The cursor names the
// last entry of the previous page (its update time and run id), so paging
// stays stable while other runs change. Errors are *weft.Error bad_filter or
// bad_cursor. It is the reference the query service's index walk is tested
// against (Spec, Keep and Finish are its three steps).
func Page(all []Summary, q ListQuery) (ListPage, error) {
	spec, err := q.Spec()
	if err != nil {
		return ListPage{}, err
	}
	var keep []Summary
	for _, s := range all {
		if spec.Keep(s) {
			keep = append(keep, s)
		}
	}
	return spec.Finish(keep), nil
}

// ListSpec is a ListQuery checked and decoded: what Keep filters and where
// the page starts.
type ListSpec struct {
	// Status and Agent are the filters ("" does not filter).
	Status, Agent string
	// Since keeps runs changed at or after it (zero does not filter).
	Since time.Time
	// Limit is the page size (1..MaxLimit).
	Limit int
	// After is the cursor's position: the page holds what follows it in
	// list order. Nil on the first page.
	After *ListPosition
}

// ListPosition is a position in list order: a run and its last change
// (Unix nanoseconds), as a cursor names it.
type ListPosition struct {
	Updated int64
	Run     string
}

// Spec checks q and decodes its filters and cursor. Errors are *weft.Error
// bad_filter (Reason names the filter) or bad_cursor.
func (q ListQuery) Spec() (ListSpec, error) {
	if q.Status != "" && !slices.Contains(Statuses(), q.Status) && q.Status != StatusQuarantined {
		return ListSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "status", Message: "status must be one of working, unattended, suspended, paused, finished, quarantined; got " + strconv.Quote(q.Status)}
	}
	if q.Agent != "" && !nameGrammar.MatchString(q.Agent) {
		return ListSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "agent", Message: "agent must be 1-128 of [A-Za-z0-9_-]; got " + strconv.Quote(q.Agent)}
	}
	spec := ListSpec{Status: q.Status, Agent: q.Agent, Limit: q.Limit}
	if q.UpdatedSince != "" {
		t, err := time.Parse(time.RFC3339Nano, q.UpdatedSince)
		if err != nil {
			return ListSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "updated_since", Message: "updated_since must be an RFC 3339 time; got " + strconv.Quote(q.UpdatedSince)}
		}
		spec.Since = t
	}
	if spec.Limit == 0 {
		spec.Limit = DefaultLimit
	}
	if spec.Limit < 0 || spec.Limit > MaxLimit {
		return ListSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "limit", Message: "limit must be 1..1000; got " + strconv.Itoa(q.Limit)}
	}
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return ListSpec{}, &weft.Error{Code: weft.CodeBadCursor, Message: "cursor is not one this service returned"}
		}
		spec.After = &ListPosition{Updated: c.Updated, Run: c.Run}
	}
	return spec, nil
}

// Keep reports whether s passes the filters and comes after the cursor.
func (spec ListSpec) Keep(s Summary) bool {
	if spec.Status != "" && s.Status != spec.Status ||
		spec.Agent != "" && s.Agent.Name != spec.Agent ||
		!spec.Since.IsZero() && s.Updated.Before(spec.Since) {
		return false
	}
	return spec.After == nil || (cursor{Updated: spec.After.Updated, Run: spec.After.Run}).before(s)
}

// Finish orders kept (entries Keep accepted; more than Limit of them when
// more follow) and cuts the page, with the cursor of the next one.
func (spec ListSpec) Finish(kept []Summary) ListPage {
	keep := slices.Clone(kept)
	slices.SortFunc(keep, CompareSummaries)
	page := ListPage{Schema: 1, Runs: []Summary{}}
	if len(keep) > spec.Limit {
		last := keep[spec.Limit-1]
		page.Next = cursor{Updated: last.Updated.UnixNano(), Run: last.Run}.encode()
		keep = keep[:spec.Limit]
	}
	page.Runs = append(page.Runs, keep...)
	return page
}

// CompareSummaries is list order: newest change first, then by run id.
func CompareSummaries(a, b Summary) int {
	if c := b.Updated.Compare(a.Updated); c != 0 {
		return c
	}
	return strings.Compare(a.Run, b.Run)
}

type cursor struct {
	Updated int64  `json:"u"`
	Run     string `json:"r"`
}

// before reports whether s comes after the cursor position in list order.
func (c cursor) before(s Summary) bool {
	u := s.Updated.UnixNano()
	if u != c.Updated {
		return u < c.Updated
	}
	return s.Run > c.Run
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, err
	}
	var c cursor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return cursor{}, err
	}
	if !nameGrammar.MatchString(c.Run) {
		return cursor{}, errBadCursor
	}
	return c, nil
}

var errBadCursor = &weft.Error{Code: weft.CodeBadCursor}

// Change is what one event changes in the stored read models: the new view
// and summary, and the inbox items to put and to delete (by ItemKey).
type Change struct {
	View      RunView
	Summary   Summary
	Approvals []ApprovalItem
	Uncertain []UncertainItem
	Questions []QuestionItem
	// DropApprovals, DropUncertain and DropQuestions are the keys of items
	// that left the inboxes and the open questions.
	DropApprovals []string
	DropUncertain []string
	DropQuestions []string
	// Applied is false when the event was not the view's next one and
	// changed nothing.
	Applied bool
}

// Derive is what a stored view accounts for: the view, its summary and its
// inbox and open-question items (nothing to drop); a quarantined view
// accounts for no items.
func Derive(v RunView) Change {
	if v.Quarantine != nil {
		return Change{View: v, Summary: Summarize(v), Applied: true}
	}
	return Change{View: v, Summary: Summarize(v), Applied: true,
		Approvals: ApprovalItems(v), Uncertain: UncertainItems(v), Questions: QuestionItems(v)}
}

// Step folds r into old and says what to store. The projector calls it with
// the view it read from KV; rebuilding calls it with the views it folds in
// memory; both store the same bytes.
func Step(old RunView, r events.Recorded) Change {
	v := Apply(old, r)
	if v.Version == old.Version {
		return Change{View: old, Summary: Summarize(old)}
	}
	return Advance(old, v)
}

// Advance says what to store when a run's view moves from old to v, one
// event or many later: v, its summary and its items, and the items of old
// that v no longer has to drop. Advance(old, Apply(old, r)) is Step(old,
// r); a projector that folds several events of a run before it writes
// stores Advance of the view it read and the last one it folded, the same
// keys and values the steps would have left.
func Advance(old, v RunView) Change {
	c := Derive(v)
	c.DropApprovals = dropped(ApprovalItems(old), c.Approvals, func(a ApprovalItem) string { return ItemKey(a.Run, a.Action) })
	c.DropUncertain = dropped(UncertainItems(old), c.Uncertain, func(a UncertainItem) string { return ItemKey(a.Run, a.Action) })
	c.DropQuestions = dropped(QuestionItems(old), c.Questions, func(a QuestionItem) string { return ItemKey(a.Run, a.Action) })
	return c
}

func dropped[T any](before, after []T, key func(T) string) []string {
	var out []string
	for _, b := range before {
		k := key(b)
		if !slices.ContainsFunc(after, func(a T) bool { return key(a) == k }) {
			out = append(out, k)
		}
	}
	return out
}
