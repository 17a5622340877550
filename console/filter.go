package console

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
)

// inboxFilter narrows the inbox and the batch page: the GET parameters
// tool, requirement (NAME or NAME@vN), older_than (a duration: 30m, 72h),
// min_amount and max_amount (the "amount" the arguments carry), and item
// (RUN/ACTION, one item: the shared link of a card). They are the flags of
// `weft decide` and select through the same client.ItemFilter, so a
// filtered page is a URL that can be shared and the batch page selects
// from exactly what the inbox shows.
type inboxFilter struct {
	// As typed, echoed by the filter form and the links.
	Tool, Requirement, OlderThan, MinAmount, MaxAmount, Item string

	sel client.ItemFilter
}

// filterParams are the inbox filter's GET parameters, in the order links
// carry them.
var filterParams = []string{"tool", "requirement", "older_than", "min_amount", "max_amount", "item"}

// parseInboxFilter reads the filter of a request's query; a value that
// does not parse is bad_filter naming the parameter.
func parseInboxFilter(v url.Values) (inboxFilter, *weft.Error) {
	g := func(k string) string { return strings.TrimSpace(v.Get(k)) }
	f := inboxFilter{Tool: g("tool"), Requirement: g("requirement"), OlderThan: g("older_than"), MinAmount: g("min_amount"), MaxAmount: g("max_amount"), Item: g("item")}
	var older time.Duration
	if f.OlderThan != "" {
		d, err := time.ParseDuration(f.OlderThan)
		if err != nil {
			return f, &weft.Error{Code: weft.CodeBadFilter, Reason: "older_than", Message: "older than: want a duration such as 30m or 72h"}
		}
		older = d
	}
	var items []string
	if f.Item != "" {
		items = []string{f.Item}
	}
	var err *weft.Error
	f.sel, err = client.ParseItemFilter(f.Tool, f.Requirement, older, f.MinAmount, f.MaxAmount, items)
	if err != nil {
		return f, err
	}
	return f, nil
}

// Active reports whether the filter narrows anything.
func (f inboxFilter) Active() bool { return f.Query() != "" }

// Query is the filter as a URL query ("" for none).
func (f inboxFilter) Query() string {
	v := url.Values{}
	for i, s := range []string{f.Tool, f.Requirement, f.OlderThan, f.MinAmount, f.MaxAmount, f.Item} {
		if s != "" {
			v.Set(filterParams[i], s)
		}
	}
	return v.Encode()
}

// Parts describes the active filter, one phrase per parameter.
func (f inboxFilter) Parts() []string {
	var out []string
	add := func(cond bool, s string) {
		if cond {
			out = append(out, s)
		}
	}
	add(f.Tool != "", "tool "+f.Tool)
	add(f.Requirement != "", "requirement "+f.Requirement)
	add(f.OlderThan != "", "older than "+f.OlderThan)
	add(f.MinAmount != "", "amount at least "+f.MinAmount)
	add(f.MaxAmount != "", "amount at most "+f.MaxAmount)
	add(f.Item != "", "item "+f.Item)
	return out
}

// match reports whether an item passes the filter: its run and action,
// tool, requirement (nil for an item that is no approval request: a
// requirement filter leaves it out), the time it has waited since and its
// arguments. An amount bound keeps only items whose arguments carry an
// amount within it.
func (f inboxFilter) match(run, action, tool string, req *events.Requirement, since time.Time, args json.RawMessage, now time.Time) bool {
	return f.sel.Match(run, action, tool, req, since, args, now)
}

// itemLink is the shareable link of an inbox item: the inbox narrowed to
// that item, scrolled to and focused on its card.
func itemLink(run, action, key string) string {
	return "/?" + url.Values{"item": {run + "/" + action}}.Encode() + "#" + key
}

// filterForm is what the inbox-filters template gets: the page the form
// goes to ("/" or "/batch"), its filter and why it did not parse.
type filterForm struct {
	Action string
	F      inboxFilter
	Err    *weft.Error
	// Batch, on the inbox, is the batch page narrowed the same way.
	Batch string
}

// Form is the filter form of the page at action.
func (f inboxFilter) Form(action string, err *weft.Error) filterForm {
	ff := filterForm{Action: action, F: f, Err: err, Batch: "/batch"}
	if q := f.Query(); q != "" {
		ff.Batch += "?" + q
	}
	return ff
}
