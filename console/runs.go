package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/projections"
)

// runsData is the runs page's data.
type runsData struct {
	// Filter echoes the filter form (Since as typed, in the viewer's zone).
	Status, Agent, Since, TZ string
	Statuses                 []string
	Runs                     []projections.Summary
	// Next is the URL of the next page; First, set when this is not the
	// first page, the URL of the first. (Whole URLs: html/template would
	// encode a query spliced after "?" as one value.)
	Next, First string
	Err         *weft.Error
	// Search is the run search (field q): Query as typed, Exact set when
	// a run has exactly that id, Scanned how many runs' ids were compared
	// for a prefix (one list page of projections.MaxLimit, with the
	// filters), Matches how many matched.
	Search struct {
		Query            string
		Exact            bool
		Scanned, Matches int
	}
	// Start is the start form.
	Start startForm
}

// startForm is the form that starts a run: empty but for the agent, with
// a new command id; after a start whose outcome is not known, the same
// form again (Run, Input and CommandID kept: sent again, it starts that
// run at most once).
type startForm struct {
	Agent     string
	Examples  []string
	CommandID string
	Run       string
	Input     string
}

// listQuery reads the list filter of a runs page request. since is a
// datetime-local value in the viewer's zone, tz the zone's offset from UTC
// in minutes west (JavaScript's getTimezoneOffset; absent: UTC).
func listQuery(v url.Values) (projections.ListQuery, error) {
	q := projections.ListQuery{Status: v.Get("status"), Agent: strings.TrimSpace(v.Get("agent")), Cursor: v.Get("cursor")}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return q, &weft.Error{Code: weft.CodeBadFilter, Reason: "limit", Message: "limit is not a number"}
		}
		q.Limit = n
	}
	if s := strings.TrimSpace(v.Get("since")); s != "" {
		t, err := parseSince(s, v.Get("tz"))
		if err != nil {
			return q, &weft.Error{Code: weft.CodeBadFilter, Reason: "updated_since", Message: err.Error()}
		}
		q.UpdatedSince = t.UTC().Format(time.RFC3339)
	}
	return q, nil
}

func parseSince(s, tz string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	loc := time.UTC
	if tz != "" {
		min, err := strconv.Atoi(tz)
		if err != nil || min < -24*60 || min > 24*60 {
			return time.Time{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "updated_since", Message: "bad time zone offset"}
		}
		loc = time.FixedZone("viewer", -min*60)
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "updated_since", Message: "updated since: want a date and time such as 2026-11-30T09:00"}
}

func (c *Console) runs(w http.ResponseWriter, r *http.Request) { c.renderRuns(w, r, nil) }

func (c *Console) renderRuns(w http.ResponseWriter, r *http.Request, fl *flash) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	v := r.URL.Query()
	lv := cloneValues(v)
	lv.Set("watch", "runs")
	live := c.liveQuery(ctx, lv)
	d := runsData{Status: v.Get("status"), Agent: v.Get("agent"), Since: v.Get("since"), TZ: v.Get("tz"), Statuses: projections.Statuses(),
		Start: startForm{Agent: c.startAgent, Examples: c.startExamples, CommandID: newCommandID()}}
	if fl != nil && fl.Start != nil {
		d.Start = *fl.Start
		d.Start.Examples = c.startExamples
	}
	status := http.StatusOK
	q, err := listQuery(v)
	search := strings.TrimSpace(v.Get("q"))
	d.Search.Query = search
	if err == nil && search != "" {
		var pg projections.ListPage
		pg, err = c.searchRuns(ctx, q, search, &d)
		if pg.Next != "" {
			nv := cloneValues(v)
			nv.Set("cursor", pg.Next)
			d.Next = "/runs?" + nv.Encode()
		}
		if q.Cursor != "" {
			fv := cloneValues(v)
			fv.Del("cursor")
			d.First = "/runs?" + fv.Encode()
		}
	} else if err == nil {
		var pg projections.ListPage
		pg, err = c.client.List(ctx, q)
		d.Runs = pg.Runs
		if pg.Next != "" {
			nv := cloneValues(v)
			nv.Set("cursor", pg.Next)
			d.Next = "/runs?" + nv.Encode()
		}
		if q.Cursor != "" {
			fv := cloneValues(v)
			fv.Del("cursor")
			d.First = "/runs?" + fv.Encode()
		}
	}
	if err != nil {
		d.Err = asWeftError(err)
		if d.Err.Code == weft.CodeBadFilter || d.Err.Code == weft.CodeBadCursor {
			status = http.StatusBadRequest
		}
	}
	c.render(w, status, "runs", page{Title: "Runs", Nav: "runs", Live: live, Flash: fl, Data: d})
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// runsFingerprint identifies the list page a runs page shows.
func (c *Console) runsFingerprint(ctx context.Context, v url.Values) (string, error) {
	q, err := listQuery(v)
	if err != nil {
		return "", err
	}
	pg, err := c.client.List(ctx, q)
	return fingerprintOf(pg), err
}

func itoa(n int) string { return strconv.Itoa(n) }

// searchRuns finds the runs of a search (docs/console.md, "Runs"): the run
// whose id is exactly search (one run query, whatever its age; on the first
// page only), then the runs whose id starts with it among one list page of
// projections.MaxLimit runs that pass the filters, most recently changed
// first. A search costs one run query and one list query of at most 1,000
// summaries; the page's Next pages on through older runs. The text of a
// run's input is not searched: the lists do not carry it, and reading it
// would mean a view per run.
func (c *Console) searchRuns(ctx context.Context, q projections.ListQuery, search string, d *runsData) (projections.ListPage, error) {
	if q.Cursor == "" {
		rep, err := c.client.RunFamily(ctx, search)
		var we *weft.Error
		switch {
		case err == nil:
			d.Search.Exact = true
			d.Runs = append(d.Runs, projections.Summarize(rep.View))
		case errors.As(err, &we) && (we.Code == weft.CodeUnknownRun || we.Code == weft.CodeInvalidName):
		default:
			return projections.ListPage{}, err
		}
	}
	q.Limit = projections.MaxLimit
	pg, err := c.client.List(ctx, q)
	if err != nil {
		return pg, err
	}
	d.Search.Scanned = len(pg.Runs)
	for _, r := range pg.Runs {
		if strings.HasPrefix(r.Run, search) && !(d.Search.Exact && r.Run == search) {
			d.Runs = append(d.Runs, r)
		}
	}
	d.Search.Matches = len(d.Runs)
	return pg, nil
}
