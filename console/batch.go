package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// The batch page answers several pending approvals at once (a batch
// decision, weft.api.decide): a list of the pending approvals with a
// checkbox each, then a summary of the selection (count, runs, total
// amount) where the person types the credential and confirms, then an
// outcome per item. It works without the script: three plain forms.

// batchRow is one pending approval on the batch page.
type batchRow struct {
	Value     string // the checkbox's value: run, action and revision
	Item      projections.ApprovalItem
	Amount    string
	Arguments string
}

// batchData is the batch page's data; Step is "select", "review" or
// "done".
type batchData struct {
	Step           string
	Rows           []batchRow
	Gone           int
	Summary        client.Selection
	Total          string
	Decision       string
	Approver       string
	CredentialHelp string
	BatchID        string
	Outcomes       []api.DecideOutcome
	Answered       int
	Err            *weft.Error
	// Filter narrows the selection step as it narrows the inbox (the same
	// GET parameters, filter.go); FilterErr is why it does not parse.
	Filter    inboxFilter
	FilterErr *weft.Error
}

func rowOf(it projections.ApprovalItem) batchRow {
	r := batchRow{Value: it.Run + " " + it.Action + " " + strconv.Itoa(it.Revision), Item: it, Arguments: string(it.Arguments)}
	if n, ok := client.ArgumentsAmount(it.Arguments); ok {
		r.Amount = strconv.FormatFloat(n, 'f', -1, 64)
	}
	return r
}

// batch serves GET /batch (the selection) and POST /batch (step review:
// the summary; step confirm: the decision).
func (c *Console) batch(w http.ResponseWriter, r *http.Request) {
	d := batchData{Step: "select", Approver: c.approver, CredentialHelp: c.credentialHelp, Decision: events.AnswerApprove}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	if r.Method == http.MethodPost {
		if !c.form(w, r) {
			return
		}
		d.Step = r.PostForm.Get("step")
		if dec := r.PostForm.Get("decision"); dec == events.AnswerReject {
			d.Decision = dec
		}
	}
	d.Filter, d.FilterErr = parseInboxFilter(r.URL.Query())
	items, err := c.client.Approvals(ctx, projector.InboxRequest{})
	if err != nil {
		d.Step, d.Err = "select", asWeftError(err)
	}
	// shown are the pending approvals the selection step lists: those
	// that pass the page's filter.
	var shown []projections.ApprovalItem
	now := time.Now()
	for _, it := range items {
		if d.FilterErr == nil && d.Filter.match(it.Run, it.Action, it.Tool, &it.Requirement, it.Requested, it.Arguments, now) {
			shown = append(shown, it)
		}
	}
	// "Select all shown" sends the rows the page listed (field shown),
	// never what the filter would match now: an item that arrived since
	// was not shown and is not answered.
	selected := r.PostForm["item"]
	if r.PostForm.Get("all") != "" {
		selected = r.PostForm["shown"]
	}
	chosen := map[string]bool{}
	for _, v := range selected {
		chosen[v] = true
	}
	var picked []projections.ApprovalItem
	for _, it := range items {
		row := rowOf(it)
		if chosen[row.Value] {
			d.Rows = append(d.Rows, row)
			picked = append(picked, it)
			delete(chosen, row.Value)
		}
	}
	if d.Step == "select" {
		d.Rows = nil
		for _, it := range shown {
			d.Rows = append(d.Rows, rowOf(it))
		}
	}
	d.Gone = len(chosen) // selected, but no longer pending as selected
	if d.Step != "select" && len(picked) == 0 {
		d.Step, d.Err = "select", &weft.Error{Code: weft.CodeInvalidRequest, Message: "Select at least one pending approval."}
		d.Rows = nil
		for _, it := range shown {
			d.Rows = append(d.Rows, rowOf(it))
		}
	}
	d.Summary = client.Summarize(picked)
	d.Total = strconv.FormatFloat(d.Summary.Total, 'f', -1, 64)
	switch d.Step {
	case "review":
		d.BatchID = api.NewCommandID()
	case "confirm":
		c.decideBatch(r, &d, picked)
	}
	status := http.StatusOK
	if d.FilterErr != nil {
		status = http.StatusBadRequest
	}
	c.render(w, status, "batch", page{Title: "Answer several approvals", Nav: "batch", Data: d})
}

// decideBatch sends the reviewed items, each with the revision the page
// showed (never another one: docs/semantics.md §4).
func (c *Console) decideBatch(r *http.Request, d *batchData, picked []projections.ApprovalItem) {
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	d.Approver = strings.TrimSpace(f.Get("approver"))
	credential, reason := f.Get("credential"), strings.TrimSpace(f.Get("reason"))
	switch {
	case d.Decision == events.AnswerApprove && credential == "":
		d.Step, d.BatchID, d.Err = "review", f.Get("batch_id"), &weft.Error{Code: weft.CodeInvalidRequest, Message: "Type your credential to approve."}
		return
	case d.Decision == events.AnswerReject && reason == "":
		d.Step, d.BatchID, d.Err = "review", f.Get("batch_id"), &weft.Error{Code: weft.CodeInvalidRequest, Message: "Type a reason to reject: the model reads it."}
		return
	}
	req := api.DecideRequest{BatchID: f.Get("batch_id")}
	for _, it := range picked {
		req.Items = append(req.Items, api.DecideItem{Run: it.Run, Action: it.Action, Revision: it.Revision, Answer: d.Decision, Approver: d.Approver, Credential: credential, Reason: reason})
	}
	rep, err := c.client.Decide(ctx, req)
	if err != nil {
		d.Step, d.Err = "review", asWeftError(err)
		d.Err.Message = redact(d.Err.Message, credential)
		return
	}
	d.Step, d.Outcomes = "done", rep.Items
	for i, o := range d.Outcomes {
		if o.Outcome == api.OutcomeAnswered {
			d.Answered++
		}
		if o.Error != nil {
			e := *o.Error
			e.Message = redact(e.Message, credential)
			d.Outcomes[i].Error = &e
		}
	}
	c.log.Info("console: batch decision", "batch", req.BatchID, "items", len(req.Items), "answered", d.Answered)
}
