package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// confirmIn is where decide reads its confirmation (the terminal; a test
// sets its own).
var confirmIn io.Reader = os.Stdin

// itemList is the repeatable --item RUN/ACTION flag.
type itemList []string

func (l *itemList) String() string { return fmt.Sprint(*l) }

// Set takes RUN/ACTION: the run id has no "/", the action id is the rest
// (such as 2/call_2_1).
func (l *itemList) Set(v string) error {
	if _, err := client.ParseItemFilter("", "", 0, "", "", []string{v}); err != nil {
		return errors.New(err.Message)
	}
	*l = append(*l, v)
	return nil
}

// approvalFilter selects pending approvals as the inbox lists them.
type approvalFilter struct {
	tool, requirement string
	minAmount         string
	maxAmount         string
	olderThan         time.Duration
	items             itemList
}

// parse makes the filter (client.ItemFilter, the console's too); a value
// that does not parse is a usage error naming its flag.
func (f approvalFilter) parse() (client.ItemFilter, error) {
	sel, err := client.ParseItemFilter(f.tool, f.requirement, f.olderThan, f.minAmount, f.maxAmount, f.items)
	if err != nil {
		return sel, usagef("--%s: %s", strings.ReplaceAll(err.Reason, "_", "-"), err.Message)
	}
	return sel, nil
}

// selectApprovals keeps the items f selects, in the inbox's order. An
// amount bound keeps only items whose arguments carry an amount within it.
func selectApprovals(items []projections.ApprovalItem, f approvalFilter, now time.Time) ([]projections.ApprovalItem, error) {
	sel, err := f.parse()
	if err != nil {
		return nil, err
	}
	var out []projections.ApprovalItem
	for _, it := range items {
		if sel.Match(it.Run, it.Action, it.Tool, &it.Requirement, it.Requested, it.Arguments, now) {
			out = append(out, it)
		}
	}
	return out, nil
}

// summarize says how many items there are, of how many runs, and their
// total amount when their arguments carry one.
func summarize(items []projections.ApprovalItem) string {
	sel := client.Summarize(items)
	s := fmt.Sprintf("%d pending approval(s) of %d run(s)", sel.Items, sel.Runs)
	switch {
	case sel.WithAmount == sel.Items:
		s += ", total amount " + strconv.FormatFloat(sel.Total, 'f', -1, 64)
	case sel.WithAmount > 0:
		s += fmt.Sprintf(", total amount %s over the %d that carry one", strconv.FormatFloat(sel.Total, 'f', -1, 64), sel.WithAmount)
	}
	return s
}

func decideCommand() command {
	return command{
		name: "decide", args: "approve|reject", summary: "approve or reject many pending approvals at once (a batch decision)",
		examples: []string{
			"weft decide approve --tool send_payment --max-amount 500 --approver desk --credential alice",
			`weft decide reject --older-than 72h --reason "too old" --approver desk --credential alice --yes`,
			"weft decide approve --item pay-7/2/call_2_1 --item pay-9/2/call_2_1 --approver desk --credential alice",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var q projector.InboxRequest
			var f approvalFilter
			fs.StringVar(&q.Run, "run", "", "only this run")
			fs.StringVar(&q.Agent, "agent", "", "only runs of this agent")
			fs.StringVar(&f.tool, "tool", "", "only calls of this tool")
			fs.StringVar(&f.requirement, "requirement", "", "only requests of this requirement: NAME or NAME@vN")
			fs.StringVar(&f.minAmount, "min-amount", "", "only calls whose arguments carry an amount of at least this")
			fs.StringVar(&f.maxAmount, "max-amount", "", "only calls whose arguments carry an amount of at most this")
			fs.DurationVar(&f.olderThan, "older-than", 0, "only requests asked at least this long ago")
			fs.Var(&f.items, "item", "only this request, RUN/ACTION (repeat)")
			approver := fs.String("approver", "", "the approver (one of the agents' approvers) that verifies the credential")
			credential := fs.String("credential", "", "the credential the approver verifies")
			reason := fs.String("reason", "", "reject: why (the model reads it)")
			by := fs.String("by", "", "reject: who rejects, when no credential is given")
			yes := fs.Bool("yes", false, "answer without asking for confirmation")
			batchID := fs.String("batch-id", "", "idempotency key of the batch (default: a fresh one); a batch over 100 items is sent as batches <id>-1, <id>-2, …")
			o := addActOpts(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 1 || args[0] != events.AnswerApprove && args[0] != events.AnswerReject {
					return usagef("want approve or reject")
				}
				answer := args[0]
				if answer == events.AnswerApprove && (*approver == "" || *credential == "") {
					return usagef("decide approve needs --approver and --credential")
				}
				if answer == events.AnswerReject && *reason == "" {
					return usagef("decide reject needs --reason")
				}
				if _, err := f.parse(); err != nil {
					return err
				}
				if *batchID == "" {
					*batchID = newCommandID()
				}
				// Each exchange has its own deadline; the confirmation has
				// none (a person reads the selection as long as they need).
				return withAPIConn(ctx, e, o.retry(), func(ctx context.Context, c *client.Client, v views) error {
					rctx, cancel := context.WithTimeout(ctx, e.timeout)
					all, err := v.Approvals(rctx, q)
					cancel()
					if err != nil {
						return err
					}
					picked, err := selectApprovals(all, f, time.Now())
					if err != nil {
						return err
					}
					if len(picked) == 0 {
						fmt.Fprintln(e.stderr, "no pending approval matches: nothing to answer")
						return nil
					}
					if _, err := chunkByRun(picked, api.MaxBatchItems); err != nil {
						return err // before asking: nothing would be sent
					}
					tw := tabwriter.NewWriter(e.stderr, 2, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "RUN\tACTION\tTOOL\tREVISION\tREQUIREMENT\tARGUMENTS")
					for _, it := range picked {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s v%d\t%s\n", it.Run, it.Action, it.Tool, it.Revision, it.Requirement.Name, it.Requirement.Version, wholeLine(string(it.Arguments)))
					}
					tw.Flush()
					fmt.Fprintf(e.stderr, "%s to %s\n", summarize(picked), answer)
					if !*yes {
						fmt.Fprintf(e.stderr, "%s these %d? [y/N] ", answer, len(picked))
						line, _ := bufio.NewReader(confirmIn).ReadString('\n')
						if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
							fmt.Fprintln(e.stderr, "nothing was answered")
							return nil
						}
					}
					chunks, err := chunkByRun(picked, api.MaxBatchItems)
					if err != nil {
						return err
					}
					var outcomes []api.DecideOutcome
					for n, chunk := range chunks {
						req := api.DecideRequest{BatchID: *batchID, Items: make([]api.DecideItem, len(chunk))}
						if len(chunks) > 1 {
							req.BatchID = fmt.Sprintf("%s-%d", *batchID, n+1)
						}
						for i, it := range chunk {
							// The revision the person saw: never another one
							// (docs/semantics.md §4).
							req.Items[i] = api.DecideItem{Run: it.Run, Action: it.Action, Revision: it.Revision, Answer: answer,
								Approver: *approver, Credential: *credential, Reason: *reason, By: *by}
						}
						rep, err := decideChunk(ctx, e, o.retry(), c, req)
						if err != nil {
							return notKnown(err, req, outcomes)
						}
						outcomes = append(outcomes, rep.Items...)
						if len(picked) > api.MaxBatchItems {
							fmt.Fprintf(e.stderr, "answered %d/%d\n", len(outcomes), len(picked))
						}
					}
					return printOutcomes(e, o.json, outcomes)
				})
			}
		},
	}
}

// chunkByRun splits items into batches of at most limit items, never one
// run's items across two (a run's items are decided all or nothing only
// within one batch: docs/protocol/40-commands.md): runs in the order they
// first appear, each added whole to the current batch while it fits. A run
// with more than limit items is refused before anything is sent.
func chunkByRun(items []projections.ApprovalItem, limit int) ([][]projections.ApprovalItem, error) {
	var runs []string
	byRun := map[string][]projections.ApprovalItem{}
	for _, it := range items {
		if _, ok := byRun[it.Run]; !ok {
			runs = append(runs, it.Run)
		}
		byRun[it.Run] = append(byRun[it.Run], it)
	}
	var out [][]projections.ApprovalItem
	var cur []projections.ApprovalItem
	for _, run := range runs {
		part := byRun[run]
		if len(part) > limit {
			return nil, fmt.Errorf("run %s has %d selected requests, over the %d a batch holds: its requests are answered all or nothing in one batch, so nothing was sent; select fewer of them (--item, --tool, an amount bound)", run, len(part), limit)
		}
		if len(cur)+len(part) > limit {
			out, cur = append(out, cur), nil
		}
		cur = append(cur, part...)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// decideChunk sends one batch under a deadline of its own: --timeout plus
// the retries' bound, started when it is sent.
func decideChunk(ctx context.Context, e *env, retry time.Duration, c *client.Client, req api.DecideRequest) (api.DecideReply, error) {
	dctx, cancel := context.WithTimeout(ctx, e.timeout+retry)
	defer cancel()
	return c.Decide(dctx, req)
}

// notKnown explains a batch (req) that got no answer: it was sent and may
// have been decided, in part or whole, so it is outcome_unknown (exit 6),
// never a failure; it names the batch id that is safe to send again and
// the items it held (a selection made again from the inbox may differ:
// the answered items leave it), and how many items earlier batches (done)
// answered. Other errors are returned as they are.
func notKnown(err error, req api.DecideRequest, done []api.DecideOutcome) error {
	if !errors.Is(err, context.DeadlineExceeded) && weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
		return err
	}
	var items []string
	for _, it := range req.Items {
		items = append(items, it.Run+"/"+it.Action)
	}
	msg := fmt.Sprintf("batch %s was sent and not answered: whether its %d request(s) were answered is not known (%v).\n"+
		"Its requests: %s.\nRead them (%s show RUN) before answering again; sending the same batch id with the same items is answered at most once",
		req.BatchID, len(req.Items), err, strings.Join(items, " "), self)
	if len(done) > 0 {
		msg += fmt.Sprintf(" (%d request(s) of earlier batches were answered before it)", len(done))
	}
	return &weft.Error{Code: weft.CodeOutcomeUnknown, Message: msg}
}

// printOutcomes prints an outcome per item and fails (exit 1) when some
// item was not answered.
func printOutcomes(e *env, asJSON bool, outcomes []api.DecideOutcome) error {
	answered := 0
	for _, o := range outcomes {
		if o.Outcome == api.OutcomeAnswered {
			answered++
		}
	}
	if asJSON {
		if err := printJSON(e.stdout, outcomes); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tACTION\tOUTCOME\tDETAIL")
		for _, o := range outcomes {
			detail := o.Status
			switch {
			case o.Error != nil:
				detail = o.Error.Error()
			case len(o.Because) > 0:
				detail = "another request of the run was refused: " + strings.Join(o.Because, ", ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Run, o.Action, o.Outcome, wholeLine(detail))
		}
		tw.Flush()
	}
	if answered < len(outcomes) {
		return fmt.Errorf("%d of %d requests answered; the others were not (see each one's outcome)", answered, len(outcomes))
	}
	fmt.Fprintf(e.stderr, "%d of %d requests answered\n", answered, len(outcomes))
	return nil
}
