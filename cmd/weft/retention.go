package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/auditexport"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
)

// retentionCommand is `weft retention apply`: docs/security.md, "Retention
// and legal hold"; docs/adr/0030-retention-and-legal-hold.md.
func retentionCommand() command {
	return command{
		name: "retention", args: "apply (--until T | --older-than DURATION) [--dry-run] [--json]",
		summary: "remove every trace of the finished runs older than an age (families together; held runs kept)",
		examples: []string{
			"weft retention apply --older-than 2160h --dry-run",
			"weft audit export --since 2026-01-01 --until 2026-04-01 -o q1.jsonl && weft retention apply --until 2026-04-01",
		},
		help: "A run goes with its whole family (parent, children, forks), and only when every run of the family is finished,\n" +
			"its last event older than the age, with no effect whose outcome nobody knows, no open question and no legal hold\n" +
			"(weft hold). A purge stopped half way is completed by the next one. Export what an auditor keeps first.",
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			older := fs.Duration("older-than", 0, "the age: remove the finished runs whose last event is older than this (for example 2160h, 90 days), counted back once from now")
			until := fs.String("until", "", "the cutoff: remove the finished runs whose last event was recorded before it (RFC 3339 or YYYY-MM-DD in UTC): the --until of the audit export kept")
			dry := fs.Bool("dry-run", false, "list what would be removed and why the rest is kept; remove nothing")
			asJSON := fs.Bool("json", false, "print the result as JSON")
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 1 || args[0] != "apply" {
					return usagef("want apply --until T or apply --older-than DURATION")
				}
				var cutoff time.Time
				switch {
				case *until != "" && *older != 0:
					return usagef("give --until or --older-than, not both")
				case *until != "":
					t, err := parseWhen("until", *until)
					if err != nil {
						return err
					}
					cutoff = t
				case *older <= 0:
					return usagef("--older-than must be a positive duration, got %s (or give --until)", *older)
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				o := retention.Options{OlderThan: *older, Until: cutoff, DryRun: *dry}
				if o.Until.IsZero() {
					// Evaluated once, here: the cutoff printed is the one applied.
					o.Now = time.Now()
					fmt.Fprintf(e.stderr, "cutoff %s (now minus %s)\n", o.Now.Add(-o.OlderThan).UTC().Format(time.RFC3339), o.OlderThan)
				}
				if !*asJSON {
					o.Progress = func(done, total int, run string) {
						fmt.Fprintf(e.stderr, "removed %d/%d: %s\n", done, total, run)
					}
				}
				res, err := retention.Apply(ctx, n.JetStream(), o)
				removed := len(res.Purged) + len(res.Completed)
				// An apply that marked runs or removed part of one changed
				// the store, even with no run removed whole: partial.
				changed := removed > 0 || len(res.Stopped) > 0
				if *asJSON && (err == nil || changed) {
					printJSON(e.stdout, res)
				}
				if err != nil && !changed {
					return err
				}
				verb := "removed"
				if *dry {
					verb = "would remove"
				}
				if !*asJSON {
					for _, r := range res.Completed {
						fmt.Fprintf(e.stdout, "%s %s (completing an interrupted purge)\n", verb, r)
					}
					for _, r := range res.Purged {
						fmt.Fprintf(e.stdout, "%s %s\n", verb, r)
					}
				}
				if err != nil {
					// Runs went or were marked, then a removal failed: exit 8,
					// naming both (the next apply completes the runs it
					// stopped in).
					done := fmt.Sprintf("retention removed %d run(s) (%s)", removed, strings.Join(slices.Concat(res.Completed, res.Purged), ", "))
					if len(res.Stopped) > 0 {
						done += fmt.Sprintf(" and stopped in %s (marked; part of it may be removed, its view too)", strings.Join(res.Stopped, ", "))
					}
					return partialError{done: done + "; the next apply completes the removal it stopped in", err: err}
				}
				if *asJSON {
					return nil
				}
				for _, k := range res.Kept {
					fmt.Fprintf(e.stdout, "kept %s: %s\n", k.Run, k.Why)
				}
				fmt.Fprintf(e.stdout, "%s %d run(s) whose last event is before %s; kept %d\n", verb, len(res.Purged)+len(res.Completed), res.Cutoff.Format(time.RFC3339), len(res.Kept))
				return nil
			}
		},
	}
}

// holdCommand is `weft hold`: a legal hold exempts a run and its family
// from retention. A hold and its release go through the command API
// (weft.api.hold, weft.api.release_hold: docs/adr/0033 §3), so they need
// only the grant to send that command (the custodian's) and a runner
// serving it, and a retry with the same --command-id answers the same
// hold; the list reads the weft_holds bucket.
func holdCommand() command {
	return command{
		name: "hold", args: "<run> --reason TEXT --by NAME|--signing-key FILE | --release [--hold ID] <run> --reason TEXT --by NAME|--signing-key FILE | list [--all] [--json]",
		summary: "place or release a legal hold on a run (retention keeps it and its family), or list the holds",
		examples: []string{
			`weft hold pay-42 --reason "dispute D-17" --by "legal: r.ortiz"`,
			`weft hold --release pay-42 --reason "dispute D-17 closed" --by "legal: r.ortiz"`,
			`weft hold pay-42 --reason "dispute D-17" --signing-key ortiz.nk   # verified (docs/security.md)`,
			"weft hold list",
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			release := fs.Bool("release", false, "release the run's hold (who and why are kept with it)")
			holdID := fs.String("hold", "", "release: which of the run's holds (its id, h1, h2, ...; needed when it has several, and with --signing-key)")
			reason := fs.String("reason", "", "why the hold is placed or released (required)")
			by := fs.String("by", "", "who places or releases it (required without --signing-key; recorded unverified, --signing-key records the key's person, verified)")
			sign := addCommandSignFlags(fs)
			commandID := fs.String("command-id", "", "idempotency key of the hold or release (default: a fresh one); the same id sent again answers the same hold")
			all := fs.Bool("all", false, "list: the released holds too")
			asJSON := fs.Bool("json", false, "print JSON")
			retry := addRetryFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				list := len(args) == 1 && args[0] == "list"
				if !list && len(args) != 1 {
					return usagef("want <run>, --release <run> or list")
				}
				if list {
					return listHolds(ctx, e, *all, *asJSON)
				}
				if *reason == "" || (*by == "" && sign.key == "") {
					return usagef("a hold and its release need --reason and --by (or --signing-key)")
				}
				if *release && *holdID == "" && sign.key != "" {
					// Its proof states the hold: one of "the run's one
					// active hold" would release a hold placed later.
					return usagef("a signed release names its hold: --hold ID (`weft hold list` shows it)")
				}
				if *commandID == "" {
					*commandID = newCommandID()
				}
				run := args[0]
				s := proof.HoldSubject(run, *reason)
				if *release {
					s = proof.ReleaseHoldSubject(run, *holdID, *reason)
				}
				signed, err := signCommand(e.stderr, sign, s)
				if err != nil {
					return err
				}
				if done, err := printedProof(e.stdout, sign, signed); done {
					return err
				}
				e.sends = true
				h, err := sendHold(ctx, e, holdCall{run: run, release: *release, hold: *holdID, by: *by, reason: *reason, commandID: *commandID, proof: signed}, retry.retry())
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(e.stdout, h)
				}
				if *release && h.Released != nil {
					fmt.Fprintf(e.stdout, "released hold %s on %s %s: %s (placed %s)\n", h.ID, run, holdWho(h.Released.By, h.Released.Identity), *reason, holdWho(h.By, h.Identity))
				} else {
					fmt.Fprintf(e.stdout, "held %s (hold %s) %s: %s\n", run, h.ID, holdWho(h.By, h.Identity), h.Reason)
				}
				return nil
			}
		},
	}
}

// holdCall is one hold or release `weft hold` sends.
type holdCall struct {
	run, hold, by, reason, commandID string
	release                          bool
	proof                            *events.CommandProof
}

// holdWho says who placed or released a hold and whether the deployment
// vouched for it: "by NAME (verified, key K)" or "by NAME (unverified)".
func holdWho(by string, id events.Identity) string {
	return projections.PersonView{By: by, Verified: id.Verified, Key: id.Key}.Describe()
}

// sendHold sends c through the command API (client.Hold or
// client.ReleaseHold) and answers the hold placed or released, as the
// weft_holds bucket keeps it (so --json prints what `hold list --json`
// lists). No answer within --timeout plus the retries is outcome_unknown
// (exit 6), saying to send it again with the same --command-id, which
// answers the same hold and places none beside it.
func sendHold(ctx context.Context, e *env, c holdCall, retry time.Duration) (retention.Hold, error) {
	var h retention.Hold
	err := withAPI(ctx, e, retry, func(ctx context.Context, cl *client.Client, _ views) error {
		var rep api.HoldReply
		var err error
		if c.release {
			rep, err = cl.ReleaseHold(ctx, api.ReleaseHoldRequest{CommandID: c.commandID, Run: c.run, Hold: c.hold, By: c.by, Reason: c.reason, Proof: c.proof})
		} else {
			rep, err = cl.Hold(ctx, api.HoldRequest{CommandID: c.commandID, Run: c.run, By: c.by, Reason: c.reason, Proof: c.proof})
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return &weft.Error{Code: weft.CodeOutcomeUnknown, Message: fmt.Sprintf("no answer from the command API within %s (is a runner serving weft.api.*?): whether the %s took effect is not known: `weft hold list --all` shows it, or send it again with the same --command-id %s, which answers the same hold (%v)", e.timeout+retry, holdVerb(c.release), c.commandID, err)}
		}
		if err != nil {
			return err
		}
		h = retention.Hold{Run: rep.Run, ID: rep.Hold, By: rep.By, Identity: events.Identity{Verified: rep.Verified, Key: rep.Key}, Reason: rep.Reason, At: rep.At}
		if !c.release {
			h.CommandID = c.commandID
		}
		if rep.Released != nil {
			h.Released = &retention.Release{By: rep.Released.By, Identity: events.Identity{Verified: rep.Released.Verified, Key: rep.Released.Key}, Reason: rep.Released.Reason, At: rep.Released.At}
			if c.release {
				h.Released.CommandID = c.commandID
			}
		}
		return nil
	})
	return h, err
}

func holdVerb(release bool) string {
	if release {
		return "release"
	}
	return "hold"
}

// listHolds is `weft hold list`: the holds as the weft_holds bucket keeps
// them (the active ones, or all).
func listHolds(ctx context.Context, e *env, all, asJSON bool) error {
	n, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer closeNode(n)
	holds, err := retention.Holds(ctx, n.JetStream())
	if err != nil {
		return err
	}
	shown := []retention.Hold{}
	for _, h := range holds {
		if h.Active() || all {
			shown = append(shown, h)
		}
	}
	if asJSON {
		return printJSON(e.stdout, shown)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "RUN\tHOLD\tBY\tSINCE\tREASON\tRELEASED")
	for _, h := range shown {
		rel := "-"
		if h.Released != nil {
			rel = fmt.Sprintf("%s at %s: %s", holdWho(h.Released.By, h.Released.Identity), h.Released.At.Format(time.RFC3339), h.Released.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Run, h.ID, strings.TrimPrefix(holdWho(h.By, h.Identity), "by "), h.At.Format(time.RFC3339), oneLine(h.Reason, 60), rel)
	}
	return nil
}

// readHold is run's active legal hold for show (nil: none), or why it
// could not be read (a permission refusal — the roles' operator and
// reader may not read weft_holds: docs/security.md, "Retention and legal
// hold" —, a timeout, a value that does not decode): then show says the
// hold is unknown, never that there is none. It reads the run's holds as
// an export does (auditexport.StoredHolds: bounded, a refusal watched on
// v answers at once).
func readHold(ctx context.Context, v *api.Violations, js jetstream.JetStream, run string) (*retention.Hold, error) {
	hs, err := auditexport.StoredHolds(ctx, js, run, v)
	if err != nil {
		return nil, err
	}
	if h := retention.ActiveOf(hs); h.Active() {
		return &h, nil
	}
	return nil, nil
}
