package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/auditexport"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
)

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// withQuery connects and hands fn a client (package client, the front
// door every application uses) for its queries.
func withQuery(ctx context.Context, e *env, fn func(ctx context.Context, c *client.Client) error) error {
	n, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer closeNode(n)
	c, err := client.New(n.Conn())
	if err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return fn(qctx, c)
}

func runsCommand() command {
	return command{
		name: "runs", summary: "list runs, most recently changed first",
		examples: []string{"weft runs", "weft runs --status suspended --agent payment-desk", "weft runs --since 2026-11-30T09:00:00Z --limit 20 --cursor <next>"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var q projections.ListQuery
			fs.StringVar(&q.Status, "status", "", "only runs with this status: working, unattended, suspended, paused, finished, quarantined")
			fs.StringVar(&q.Agent, "agent", "", "only runs of this agent")
			fs.StringVar(&q.UpdatedSince, "since", "", "only runs changed at or after this RFC 3339 time")
			fs.IntVar(&q.Limit, "limit", 0, "page size, 1..1000 (default 50)")
			fs.StringVar(&q.Cursor, "cursor", "", "the next-page cursor a previous page printed")
			asJSON := fs.Bool("json", false, "print the page as JSON")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				return withQuery(ctx, e, func(ctx context.Context, c *client.Client) error {
					page, err := c.List(ctx, q)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(e.stdout, page)
					}
					tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "RUN\tSTATUS\tAGENT\tTURNS\tAPPROVALS\tUNCERTAIN\tUPDATED")
					for _, s := range page.Runs {
						status := s.Status
						if s.Outcome != "" {
							status += " (" + s.Outcome + ")"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s@%s\t%d\t%d\t%d\t%s\n", s.Run, status, s.Agent.Name, s.Agent.Version, s.Turns, s.Approvals, s.Uncertain, s.Updated.Format(time.RFC3339))
					}
					tw.Flush()
					if page.Next != "" {
						fmt.Fprintf(e.stdout, "more: weft runs --cursor %s\n", page.Next)
					}
					return nil
				})
			}
		},
	}
}

func showCommand() command {
	return command{
		name: "show", args: "<run>", summary: "show a run: status, usage, actions and what it waits for",
		examples: []string{"weft show pay-42", "weft show pay-42 --json"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			asJSON := fs.Bool("json", false, "print the run view as JSON")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				// Without the legal holds, show says the hold is unknown
				// (readHold): their refusal does not end it.
				e.tolerates = auditexport.HoldsSubject
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				ctx, cancel := context.WithTimeout(ctx, e.timeout)
				defer cancel()
				c, err := client.New(n.Conn())
				if err != nil {
					return err
				}
				log := eventlog.New(n.JetStream())
				var r projector.RunReply
				lag, err := freshView(ctx, log, args[0], func(ctx context.Context) (projections.RunView, error) {
					rr, err := c.RunFamily(ctx, args[0])
					if err == nil {
						r = rr
					}
					// The view is at the log's head; show waits (bounded) for
					// the projector to store it, so that the lists and
					// inboxes read next have it too, and says when not.
					stored := rr.View
					stored.Version = rr.Projected
					return stored, err
				})
				if err != nil {
					return err
				}
				hold, holdErr := readHold(ctx, e.refusals, n.JetStream(), args[0])
				if *asJSON {
					if lag != "" {
						fmt.Fprintf(e.stderr, "note: the lists and inboxes may not have this view yet: %s\n", lag)
					}
					return printJSON(e.stdout, shownRun{r.View, r.FamilyStatus, r.ChildStatus, hold, errText(holdErr)})
				}
				printView(e.stdout, r, lag)
				if holdErr != nil {
					fmt.Fprintf(e.stdout, "hold       unknown (cannot read %s: %v)\n", retention.HoldsBucket, holdErr)
				}
				if hold != nil {
					fmt.Fprintf(e.stdout, "hold       %s since %s: %s (retention keeps the run and its family)\n", holdWho(hold.By, hold.Identity), hold.At.Format(time.RFC3339), hold.Reason)
				}
				return nil
			}
		},
	}
}

// viewWait bounds how long a command that answers from a run's view
// (show; approve and reject without --revision) waits for the view to catch
// up with the run's log.
const viewWait = 2 * time.Second

// freshView reads a run's view with read, then the head of the run's log,
// and reads again until the view has caught up with the head read after it
// or viewWait (or ctx) ends the wait. It returns how the last view read
// lags the log (projector.Lag: "" when it caught up), or a note saying the
// log's head could not be read. The read model follows the log eventually:
// right after a command, a view may not have it yet.
func freshView(ctx context.Context, log *eventlog.Log, run string, read func(context.Context) (projections.RunView, error)) (string, error) {
	deadline := time.Now().Add(viewWait)
	var lag string
	for first := true; ; first = false {
		v, err := read(ctx)
		if err != nil && first {
			return "", err
		}
		if err != nil {
			// ctx ended between two reads: the previous view stands.
			return lag, nil
		}
		h, err := log.Head(ctx, run)
		if err != nil {
			return fmt.Sprintf("the view (version %d) could not be compared with the run's log: %v", v.Version, err), nil
		}
		lag = projector.Lag(v, h)
		if lag == "" || !time.Now().Before(deadline) {
			return lag, nil
		}
		select {
		case <-ctx.Done():
			return lag, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// shownRun is what `weft show --json` prints: the run view with the run
// query's family_status and child_status added at its top level.
type shownRun struct {
	projections.RunView
	FamilyStatus projections.Family      `json:"family_status"`
	ChildStatus  []projector.ChildStatus `json:"child_status,omitempty"`
	// Hold is the run's legal hold, when it has one (weft hold).
	Hold *retention.Hold `json:"hold,omitempty"`
	// HoldUnknown says why the hold could not be read (then Hold says
	// nothing).
	HoldUnknown string `json:"hold_unknown,omitempty"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// differs reports whether a family status says more than the own status.
func differs(f projections.Family, own string) bool {
	return f.Status != own || len(f.Waiting) > 0
}

func describeFamily(f projections.Family) string {
	if len(f.Waiting) == 0 {
		return f.Status
	}
	return f.Status + ", waiting for child run " + strings.Join(f.Waiting, ", ")
}

// printView prints a run's view; lag, when not empty, says how the view
// lags the run's log (freshView).
func printView(w io.Writer, r projector.RunReply, lag string) {
	v := r.View
	fmt.Fprintf(w, "run        %s\n", v.Run)
	if lag != "" {
		fmt.Fprintf(w, "note       the lists and inboxes may not have what follows yet: %s\n", lag)
	}
	if p := v.Parent; p != nil {
		fmt.Fprintf(w, "parent     %s (action %s, depth %d)\n", p.Run, p.Action, p.Depth)
	}
	if f := v.ForkedFrom; f != nil {
		fmt.Fprintf(w, "forked     from %s before turn %d (its version %d)\n", f.Run, f.Turn, f.Version)
	}
	if p := v.Restarted; p != nil && (p.By != "" || p.Verified) {
		fmt.Fprintf(w, "restarted  %s%s\n", p.Describe(), ifSet(": ", p.Reason))
	}
	for _, f := range r.Forks {
		fmt.Fprintf(w, "fork       %s from turn %d (started %s)\n", f.Run, f.Turn, f.Started.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "agent      %s@%s\n", v.Agent.Name, v.Agent.Version)
	status := v.Status
	if v.Outcome != nil {
		status += ": " + events.DescribeOutcome(*v.Outcome)
	}
	fmt.Fprintf(w, "status     %s\n", status)
	if p := v.Pause; p != nil {
		fmt.Fprintf(w, "paused     since %s %s%s\n", p.Since.Format(time.RFC3339), p.Person().Describe(), ifSet(": ", p.Reason))
	}
	if q := v.Quarantine; q != nil {
		fmt.Fprintf(w, "quarantine the message at stream sequence %d cannot be folded: %s\n           nothing acts on the run; see weft repair show %s (the view is the run before that message)\n", q.Seq, q.Reason, v.Run)
	}
	if differs(r.FamilyStatus, v.Status) {
		fmt.Fprintf(w, "family     %s\n", describeFamily(r.FamilyStatus))
	}
	fmt.Fprintf(w, "input      %q\n", v.Input)
	fmt.Fprintf(w, "turns      %d\n", v.Turns)
	fmt.Fprintf(w, "tokens     %d in, %d out", v.Usage.InputTokens, v.Usage.OutputTokens)
	if v.Usage.Unreported > 0 {
		fmt.Fprintf(w, ", %d replies without usage", v.Usage.Unreported)
	}
	fmt.Fprintf(w, "\nstarted    %s\nupdated    %s (version %d)\n", v.Started.Format(time.RFC3339), v.Updated.Format(time.RFC3339), v.Version)
	if len(v.Actions) > 0 {
		fmt.Fprintln(w, "\nactions:")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ACTION\tTOOL\tSTATE\tATTEMPTS\tDETAIL")
		for _, a := range v.Actions {
			detail := a.Result
			if detail == "" {
				detail = a.Detail
			}
			if a.State == projections.StateUncertain {
				detail = a.Evidence
			}
			if a.State == projections.StateSettling {
				detail = settleWait(a)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", a.ID, a.Tool, a.State, a.Attempts, oneLine(detail, 60))
		}
		tw.Flush()
	}
	if len(v.Children) > 0 {
		fmt.Fprintln(w, "\nchild runs:")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ACTION\tRUN\tAGENT\tSTATUS")
		for i, c := range v.Children {
			var cs projector.ChildStatus
			if i < len(r.ChildStatus) && r.ChildStatus[i].Run == c.Run {
				cs = r.ChildStatus[i]
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s@%s\t%s\n", c.Action, c.Run, c.Agent.Name, c.Agent.Version, childStatus(c, cs))
		}
		tw.Flush()
	}
	printAnswers(w, v)
	printPeople(w, v)
	for _, run := range r.FamilyStatus.Waiting {
		fmt.Fprintf(w, "\nwaiting for child run %s (suspended)\n  show: weft show %s\n", run, run)
	}
	for _, a := range v.Actions {
		if a.Pending != nil {
			exp := "never"
			if a.Pending.Expires != nil {
				exp = a.Pending.Expires.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "\nwaiting for approval: %s %s %s revision %d requirement %s v%d, expires %s\n  approve: %s approve %s %s --revision %d --approver <approver> --credential <credential>\n",
				a.ID, a.Tool, oneLine(string(a.Arguments), 60), a.Pending.Revision, a.Pending.Requirement.Name, a.Pending.Requirement.Version, exp, self, v.Run, a.ID, a.Pending.Revision)
		}
		if a.Question.Open() {
			fmt.Fprintf(w, "\nopen question: %s %s was reconciled unconfirmed (%q); the run went on\n  resolve: %s resolve %s %s --output '<json>' | --error '<message>'\n",
				a.ID, a.Tool, a.Question.Note, self, v.Run, a.ID)
		}
		if q := a.Question; q != nil && q.Resolution != nil {
			// Who resolved it, said as the who: section says it (verified
			// or not, "nobody named" for no name: docs/security.md).
			fmt.Fprintf(w, "\nresolved: %s %s: %s %s %s at %s\n", a.ID, a.Tool, q.Resolution.Kind, oneLine(q.Resolution.Result, 80), q.Resolution.Person().Describe(), q.Resolution.At.Format(time.RFC3339))
		}
		if a.State == projections.StateSettling {
			fmt.Fprintf(w, "\n%s: %s %s (its body stopped: %s); the tool's own settlement ends it, else its effect becomes uncertain\n",
				settleWait(a), a.ID, a.Tool, a.Evidence)
		}
		if a.State == projections.StateUncertain {
			fmt.Fprintf(w, "\neffect uncertain: %s %s: %s\n  reconcile: %s reconcile %s %s --output '<json>' | --error '<message>' | --unconfirmed '<note>'\n",
				a.ID, a.Tool, a.Evidence, self, v.Run, a.ID)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// settleWait says what a settling action waits for.
func settleWait(a projections.ActionView) string {
	if a.SettleBy == nil {
		return "waiting for a settlement"
	}
	return "waiting for a settlement until " + a.SettleBy.Format(time.RFC3339)
}

// childStatus describes a child run: its status when the query was
// answered (and its family status when that says more), the outcome its
// parent recorded, and whether the parent detached from it.
func childStatus(c projections.ChildView, cs projector.ChildStatus) string {
	var parts []string
	switch {
	case cs.Status == "" && c.Outcome == nil:
		parts = append(parts, "not started yet")
	case cs.Status != "":
		st := cs.Status
		if cs.FamilyStatus != nil && differs(*cs.FamilyStatus, cs.Status) {
			st += " (family " + cs.FamilyStatus.Status + ")"
		}
		parts = append(parts, st)
	}
	if c.Outcome != nil {
		parts = append(parts, "settled: "+oneLine(events.DescribeOutcome(*c.Outcome), 60))
	}
	if c.Detached {
		parts = append(parts, "detached")
	}
	return strings.Join(parts, "; ")
}

// wholeLine is s on one line, never cut: what a person decides on.
func wholeLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func eventsCommand() command {
	return command{
		name: "events", args: "<run>", summary: "print a run's history as a readable timeline",
		examples: []string{"weft events pay-42", "weft events pay-42 --json > pay-42.jsonl"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			asJSON := fs.Bool("json", false, "print the event envelopes as JSON lines")
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 1, "<run>"); err != nil {
					return err
				}
				return withQuery(ctx, e, func(ctx context.Context, c *client.Client) error {
					envs, _, err := history(ctx, c, args[0])
					if errors.Is(err, &weft.Error{Code: weft.CodeUnavailable}) {
						// No query service: read the log directly.
						envs, err = loadDirect(ctx, e, args[0])
					}
					if err != nil {
						return err
					}
					if *asJSON {
						return audit.Export(e.stdout, envs)
					}
					for _, env := range envs {
						ev, err := env.Event()
						desc := ""
						if err != nil {
							desc = fmt.Sprintf("%s (undecodable: %v)", env.Type, err)
						} else {
							desc = events.Describe(ev)
							if n := events.Note(ev); n != "" {
								desc += "   (" + n + ")"
							}
						}
						fmt.Fprintf(e.stdout, "%4d  %s  %s\n", env.Version, env.Recorded.Format("2006-01-02 15:04:05.000"), desc)
					}
					return nil
				})
			}
		},
	}
}

// loadDirect reads a run's history from the log itself.
func loadDirect(ctx context.Context, e *env, run string) ([]events.Envelope, error) {
	n, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer closeNode(n)
	envs, _, err := eventlog.New(n.JetStream()).Load(ctx, run)
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return nil, weft.UnknownRun(run)
	}
	return envs, nil
}

// history reads a run's whole history through the query service.
func history(ctx context.Context, c *client.Client, run string) ([]events.Envelope, eventlog.Head, error) {
	var out []events.Envelope
	var after uint64
	for {
		h, err := c.History(ctx, projector.HistoryRequest{Run: run, After: after, Limit: projector.MaxHistoryLimit})
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

func inboxCommand() command {
	return command{
		name: "inbox", args: "approvals|uncertain|questions", summary: "list pending approvals, uncertain effects or open questions across runs",
		examples: []string{"weft inbox approvals", "weft inbox uncertain --agent payment-desk", "weft inbox questions", "weft inbox approvals --run pay-42 --json"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			var q projector.InboxRequest
			fs.StringVar(&q.Run, "run", "", "only this run")
			fs.StringVar(&q.Agent, "agent", "", "only runs of this agent")
			asJSON := fs.Bool("json", false, "print as JSON")
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 1 || (args[0] != "approvals" && args[0] != "uncertain" && args[0] != "questions") {
					got := ""
					if len(args) == 1 {
						got = didYouMean(args[0], []string{"approvals", "uncertain", "questions"})
					}
					return usagef("want approvals, uncertain or questions%s", got)
				}
				return withQuery(ctx, e, func(ctx context.Context, c *client.Client) error {
					tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
					defer tw.Flush()
					if args[0] == "approvals" {
						items, err := c.Approvals(ctx, q)
						if err != nil {
							return err
						}
						if *asJSON {
							return printJSON(e.stdout, items)
						}
						// The arguments are what a person approves: the
						// last column, whole (an amount cut off is not
						// one to approve).
						fmt.Fprintln(tw, "RUN\tACTION\tTOOL\tREVISION\tREQUIREMENT\tEXPIRES\tARGUMENTS")
						for _, it := range items {
							exp := "never"
							if it.Expires != nil {
								exp = it.Expires.Format(time.RFC3339)
							}
							fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s v%d\t%s\t%s\n", it.Run, it.Action, it.Tool, it.Revision, it.Requirement.Name, it.Requirement.Version, exp, wholeLine(string(it.Arguments)))
						}
						return nil
					}
					if args[0] == "questions" {
						items, err := c.Questions(ctx, q)
						if err != nil {
							return err
						}
						if *asJSON {
							return printJSON(e.stdout, items)
						}
						fmt.Fprintln(tw, "RUN\tACTION\tTOOL\tSINCE\tRUN STATUS\tNOTE\tARGUMENTS")
						for _, it := range items {
							st := "live"
							if it.Finished {
								st = "finished"
							}
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Run, it.Action, it.Tool, it.Since.Format(time.RFC3339), st, oneLine(it.Note, 40), wholeLine(string(it.Arguments)))
						}
						return nil
					}
					r, err := c.Uncertain(ctx, q)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(e.stdout, r)
					}
					fmt.Fprintln(tw, "RUN\tACTION\tTOOL\tAGE\tEVIDENCE")
					for _, it := range r.Items {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.Run, it.Action, it.Tool, (time.Duration(it.AgeMillis) * time.Millisecond).Round(time.Second), oneLine(it.Evidence, 60))
					}
					return nil
				})
			}
		},
	}
}

func auditCommand() command {
	return command{
		name: "audit", args: "export <run> | export --since T --until T [--status S] -o FILE | verify <run> | verify --file <export.jsonl> [--trust KEY] [--trust-file FILE] [--people FILE]... [--head [RUN:]VERSION:HASH]... [--manifest-digest sha256:HEX] [--unfinished]",
		summary: "export a run's history (or every run of a time range) as JSON lines, or verify its hash chain, signed heads, refold and view",
		examples: []string{
			"weft audit export pay-42 -o pay-42.jsonl",
			"weft audit export --since 2026-01-01 --until 2026-04-01 --status finished -o q1.jsonl",
			"weft audit verify --file q1.jsonl --trust UBX… --manifest-digest sha256:3a7b…",
			"weft audit verify pay-42",
			"weft audit verify --file pay-42.jsonl --trust UBX…",
			"weft audit verify --file pay-42.jsonl --trust UBX… --people persons.txt",
			"weft audit verify --file pay-42.jsonl --head 31:9f86d0…",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			out := fs.String("o", "", "export: write to this file instead of stdout")
			since := fs.String("since", "", "export: every run whose last event was recorded at or after this time (RFC 3339, or a date YYYY-MM-DD in UTC), with --until")
			until := fs.String("until", "", "export: … and before this time")
			status := fs.String("status", "", "export of a range: only the runs of this status (finished, working, suspended, unattended, paused)")
			file := fs.String("file", "", "verify: an exported history instead of the live run")
			asJSON := fs.Bool("json", false, "verify: print the report as JSON")
			var trust keyList
			fs.Var(&trust, "trust", "verify: a key (nkey user public key, U…) whose signed heads you trust; repeat or separate with commas. With it, the history must end with a head signed by these keys over a finished run (or give --head or --unfinished)")
			trustFile := fs.String("trust-file", "", "verify: a file of trusted keys, one a line: a runner's head key (as --trust), or \"person KEY NAME\", a person's key and the name recorded for it")
			var peopleFiles listFlag
			fs.Var(&peopleFiles, "people", "verify: a keys file of the people's keys you trust, with their names: the runners' person keys file (runner --person-keys), and the approver keys (same format); repeat for several. Without it (or person lines in --trust-file) the people's keys are not checked: verify lists them")
			var head listFlag
			fs.Var(&head, "head", "verify: VERSION:HASH of the run's head from an independent source; the history must hold it as its last event. For a file of several runs, RUN:VERSION:HASH (repeat for several runs)")
			manifestDigest := fs.String("manifest-digest", "", "verify --file of a range's export: the manifest digest (sha256:…) the export printed, kept apart from the file; the file must hold that manifest (without it, the manifest catches a file cut short, not an edit)")
			unfinished := fs.Bool("unfinished", false, "verify: accept a history that does not end with a signed head over a finished run, or events after the --head named (a live run's export); it says which events nobody vouches for")
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) == 0 {
					return usagef("want export <run> or verify <run>|--file <path>")
				}
				// Without the legal holds, export and verify say they are
				// unknown (auditexport.StoredHolds): their refusal does not end it.
				e.tolerates = auditexport.HoldsSubject
				switch args[0] {
				case "export":
					if *since != "" || *until != "" {
						if err := wantArgs(args[1:], 0, "export --since T --until T, without a run"); err != nil {
							return err
						}
						return auditExportRange(ctx, e, *since, *until, *status, *out)
					}
					if err := wantArgs(args[1:], 1, "export <run>"); err != nil {
						return err
					}
					return auditExport(ctx, e, args[1], *out)
				case "verify":
					opts, trusted, err := verifyOptions(trust, *trustFile, peopleFiles, *unfinished)
					if err != nil {
						return err
					}
					var rep audit.Report
					var envs []events.Envelope
					var headVersion uint64
					switch {
					case *file != "" && len(args) == 1:
						return verifyFileRuns(e, *file, *asJSON, trusted, head, *manifestDigest, opts)
					case *file == "" && len(args) == 2:
						heads, herr := parseHeads(head)
						if herr != nil {
							return herr
						}
						byRun, herr := headsFor(heads, []string{args[1]})
						if herr != nil {
							return herr
						}
						if h, ok := byRun[args[1]]; ok {
							opts, headVersion = append(opts, audit.WithHeadAt(h.version, h.hash)), h.version
						}
						rep, envs, err = verifyLive(ctx, e, args[1], opts...)
					default:
						return usagef("want verify <run> or verify --file <path>")
					}
					if err != nil {
						return err
					}
					if *asJSON {
						printJSON(e.stdout, rep)
					} else {
						printReport(e.stdout, rep, envs, trusted, headVersion)
					}
					if !rep.OK() {
						return auditError{fmt.Sprintf("audit: %s", rep.Problem.Error())}
					}
					return nil
				}
				return usagef("unknown audit command %q", args[0])
			}
		},
	}
}

func auditExport(ctx context.Context, e *env, run, out string) error {
	n, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer closeNode(n)
	x, err := auditexport.Read(ctx, n.JetStream(), run, auditexport.WithViolations(e.refusals))
	if err != nil {
		return err
	}
	if len(x.Events) == 0 {
		return weft.UnknownRun(run)
	}
	noteHoldsUnread(e, run, x)
	if out == "" {
		err = x.Write(e.stdout)
	} else {
		err = writeWhole(out, x.Write)
	}
	if err != nil {
		return err
	}
	if out != "" {
		fmt.Fprintf(e.stderr, "exported %d events of %s to %s%s%s\n", len(x.Events), run, out, voidNote(x.Voids), holdNote(x.Holds))
	}
	printSigners(e.stderr, x.Events)
	return nil
}

func verifyLive(ctx context.Context, e *env, run string, extra ...audit.Option) (rep audit.Report, _ []events.Envelope, ferr error) {
	n, err := e.connect(ctx)
	if err != nil {
		return audit.Report{}, nil, err
	}
	defer closeNode(n)
	js := n.JetStream()
	log := eventlog.New(js)
	envs, head, err := log.Load(ctx, run)
	voids, verr := log.Voids(ctx, run)
	if verr != nil {
		fmt.Fprintf(e.stderr, "note: the run's void records could not be read (%v): who repaired it is not checked\n", verr)
		voids = nil
	}
	// The legal holds are read last (this runs after the view and the
	// parent were read): a refusal of weft_holds (the reader's) does not
	// end the command (the audit command tolerates auditexport.HoldsSubject) and is
	// reported as holds_unknown, never as "no hold".
	defer func() {
		if ferr != nil {
			return
		}
		holds, herr := auditexport.StoredHolds(ctx, js, run, e.refusals)
		unread := ""
		if herr != nil {
			unread = herr.Error()
		}
		rep = checkHolds(run, holds, unread, checkVoids(e.stderr, run, voids, rep, extra), extra)
	}()
	if errors.Is(err, eventlog.ErrCorrupt) {
		return audit.Report{Run: run, Problem: &audit.Problem{Kind: audit.KindChain, Message: err.Error()}}, nil, nil
	}
	if err != nil {
		return audit.Report{}, nil, err
	}
	if len(envs) == 0 {
		return audit.Report{}, nil, weft.UnknownRun(run)
	}
	opts := append([]audit.Option{audit.WithHead(head.Hash)}, extra...)
	// A restarted run: its link to the parent, against the parent's log.
	if parent := forkParent(envs); parent != "" {
		penvs, _, perr := log.Load(ctx, parent)
		switch {
		case perr != nil:
			fmt.Fprintf(e.stderr, "note: the parent run %s could not be read (%v): the fork's link to it is unchecked\n", parent, perr)
		case len(penvs) == 0:
			fmt.Fprintf(e.stderr, "note: the parent run %s has no events in the log (removed?): the fork's link to it is unchecked\n", parent)
		default:
			opts = append(opts, audit.WithParent(penvs))
		}
	}
	if kv, err := js.KeyValue(ctx, projector.BucketViews); err == nil {
		entry, err := kv.Get(ctx, run)
		switch {
		case err == nil:
			// Compare only a view projected up to this head; a projector
			// still catching up is not a finding.
			if v, derr := projections.DecodeView(entry.Value()); derr == nil && v.Version == head.Version {
				opts = append(opts, audit.WithView(entry.Value()))
			} else {
				fmt.Fprintf(e.stderr, "note: the stored view is at version %d, the log at %d; view not compared\n", v.Version, head.Version)
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
			fmt.Fprintln(e.stderr, "note: the run has no stored view yet; view not compared")
		}
	}
	return audit.Verify(envs, opts...), envs, nil
}

func rebuildCommand() command {
	return command{
		name: "rebuild", summary: "recompute every read model from sequence 1, with progress",
		examples: []string{"weft rebuild", "NATS_URL=nats://10.0.0.5:4222 weft rebuild"},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				js := n.JetStream()
				if err := provision.Ensure(ctx, js, projector.Assets()); err != nil {
					return err
				}
				bar := &progressBar{w: e.stderr}
				cp, err := projector.Rebuild(ctx, js, eventlog.New(js), bar.update)
				bar.done()
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "rebuilt every read model up to stream sequence %d\n", cp.Seq)
				return nil
			}
		},
	}
}

// progressBar draws "fold  [#####.....]  50%  5000/10000" on one line.
type progressBar struct {
	w     io.Writer
	phase string
}

func (p *progressBar) update(phase string, done, total uint64) {
	if p.phase != "" && phase != p.phase {
		fmt.Fprintln(p.w)
	}
	p.phase = phase
	pct := uint64(100)
	if total > 0 {
		pct = done * 100 / total
	}
	const width = 30
	fill := int(pct * width / 100)
	label := map[string]string{"fold": "reading events", "write": "writing views "}[phase]
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%%  %d/%d", label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, done, total)
}

func (p *progressBar) done() {
	if p.phase != "" {
		fmt.Fprintln(p.w)
	}
}

// ifSet returns prefix+s, or "" for an empty s.
func ifSet(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
