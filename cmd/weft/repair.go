package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// repairHelp is what `weft repair --help` adds to the flags: what the
// command does and who may run it (docs/reliability.md).
const repairHelp = `A run is quarantined when its log holds a message no reader can fold (not
JSON, not a log message, an envelope of another run, an unknown event type,
a broken chain, a Weft-* header that contradicts the body). Every other run
goes on; nothing acts on the quarantined one (commands answer quarantined,
its view says status quarantined with the message's stream sequence).

  weft runs --status quarantined       which runs are quarantined
  weft repair show <run>               the offending message: sequence, subject,
                                       headers, body, what is wrong with it; and
                                       the run's earlier repairs: who voided each
                                       message and whether the record's signed
                                       proof verifies (as audit verify checks it;
                                       exit 4 when one does not)
  weft repair drop <run> --seq N --reason "..." [--by NAME]
                                       supersede that message: a void record is
                                       appended on the run's subject (the message
                                       stays in the log as evidence, its SHA-256 in
                                       the record); readers skip it, the run is
                                       served again from the events before it

drop refuses unless the run is quarantined by exactly that message (a message
readers can fold is never voided). A run quarantined by several messages needs
one drop per message, in order. The repair is recorded: weft audit verify lists
every void record of a run (who, why, when, which bytes). With the roles of
docs/security.md only the runner's credentials may append to the log, so
drop needs them (--creds runner.creds); show works with an operator's or a
reader's.
`

func repairCommand() command {
	return command{
		name: "repair", args: "show <run> | drop <run> --seq N --reason TEXT",
		summary: "show or void the malformed message that quarantines a run (docs/reliability.md)",
		examples: []string{
			"weft runs --status quarantined",
			"weft repair show pay-7",
			"weft repair drop pay-7 --seq 1042 --reason 'published by hand by mistake' --by alice --creds secure/runner.creds",
		},
		help: repairHelp,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			seq := fs.Uint64("seq", 0, "drop: the stream sequence of the message to void (as weft repair show prints it)")
			reason := fs.String("reason", "", "drop: why the message is voided (required; recorded)")
			by := fs.String("by", os.Getenv("USER"), "drop: who voids it (recorded as typed; with --signing-key required, recorded beside the key that signs the void)")
			sf := addSignFlags(fs)
			maxBody := fs.Int("max", 4096, "show: print at most this many bytes of the body")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, e *env, args []string) error {
				if len(args) != 2 || !slices.Contains([]string{"show", "drop"}, args[0]) {
					return usagef("want show <run> or drop <run> --seq N --reason TEXT (see weft repair --help)")
				}
				run := args[1]
				if err := eventlog.CheckRun(run); err != nil {
					return err
				}
				n, err := e.connect(ctx)
				if err != nil {
					return err
				}
				defer closeNode(n)
				log := eventlog.New(n.JetStream())
				switch args[0] {
				case "show":
					return repairShow(ctx, e, log, run, *maxBody, *asJSON)
				default:
					if *seq == 0 {
						return usagef("drop needs --seq N (the sequence weft repair show prints)")
					}
					if *reason == "" {
						return usagef("drop needs --reason: it is recorded with the repair")
					}
					if sf.key != "" && !flagSet(fs, "by") {
						return usagef("drop --signing-key needs --by NAME: the proof covers the key, not a name, so the name recorded beside it is the one you type")
					}
					signed, err := signVoid(ctx, e.stdout, log, sf, run, *seq, *reason)
					if err != nil {
						return err
					}
					rec, err := log.VoidSigned(ctx, run, *seq, *reason, *by, signed, time.Now())
					if err != nil {
						return err
					}
					if *asJSON {
						printJSON(e.stdout, rec)
						return nil
					}
					who, _ := audit.CheckVoid(run, rec)
					fmt.Fprintf(e.stdout, "voided the message at stream sequence %d of run %s (%d bytes, sha256 %s) %s: void record at sequence %d\n",
						rec.Seq, run, rec.Bytes, rec.SHA256, who.Describe(), rec.At)
					p, err := log.Quarantine(ctx, run)
					switch {
					case err != nil:
						return err
					case p != nil:
						fmt.Fprintf(e.stdout, "the run is still quarantined: %s\nrun weft repair show %s\n", p.Error(), run)
					default:
						fmt.Fprintf(e.stdout, "run %s is no longer quarantined: readers fold it again and runners act on it\n", run)
					}
					return nil
				}
			}
		},
	}
}

// repairShown is the JSON of `weft repair show`.
type repairShown struct {
	Run         string                `json:"run"`
	Quarantined bool                  `json:"quarantined"`
	Seq         uint64                `json:"seq,omitempty"`
	Problem     string                `json:"problem,omitempty"`
	Subject     string                `json:"subject,omitempty"`
	Headers     map[string][]string   `json:"headers,omitempty"`
	Body        string                `json:"body,omitempty"`
	Bytes       int                   `json:"bytes,omitempty"`
	Voids       []eventlog.VoidRecord `json:"voids,omitempty"`
	// Checks is the check of each void record, in the order of Voids, as
	// `weft audit verify` checks it (audit.CheckVoid): who voided it and
	// whether its signed proof verifies (Problem says why not).
	Checks []voidChecked `json:"checks,omitempty"`
}

// voidChecked is the check of one void record.
type voidChecked struct {
	audit.VoidCheck
	Problem string `json:"problem,omitempty"`
}

// checkVoidRecords checks each of voids of run as audit verify does,
// without a trust: a signed proof is checked against the record.
func checkVoidRecords(run string, voids []eventlog.VoidRecord) []voidChecked {
	out := make([]voidChecked, 0, len(voids))
	for _, v := range voids {
		who, p := audit.CheckVoid(run, v)
		c := voidChecked{VoidCheck: who}
		if p != nil {
			c.Problem = p.Message
		}
		out = append(out, c)
	}
	return out
}

// describe says who voided the message and whether the record's signed
// proof verifies.
func (c voidChecked) describe() string {
	switch {
	case c.Problem != "":
		return fmt.Sprintf("by %q: its signed proof DOES NOT VERIFY (%s)", c.By, c.Problem)
	case c.Verified:
		return c.Describe() + ": the signed proof verifies"
	}
	return c.Describe()
}

func repairShow(ctx context.Context, e *env, log *eventlog.Log, run string, maxBody int, asJSON bool) error {
	p, err := log.Quarantine(ctx, run)
	if err != nil {
		return err
	}
	voids, err := log.Voids(ctx, run)
	if err != nil {
		return err
	}
	checks := checkVoidRecords(run, voids)
	shown := repairShown{Run: run, Voids: voids, Checks: checks}
	if p == nil {
		if head, err := log.Head(ctx, run); err == nil && head.IsZero() {
			return weft.UnknownRun(run)
		}
	} else {
		m, err := log.Message(ctx, p.Seq)
		if err != nil {
			return err
		}
		body := m.Data
		if maxBody >= 0 && len(body) > maxBody {
			body = body[:maxBody]
		}
		shown = repairShown{Run: run, Quarantined: true, Seq: p.Seq, Problem: p.Reason, Subject: m.Subject,
			Headers: m.Header, Body: printable(body), Bytes: len(m.Data), Voids: voids, Checks: checks}
	}
	if asJSON {
		printJSON(e.stdout, shown)
		return voidsNotVerified(run, voids, checks)
	}
	if !shown.Quarantined {
		fmt.Fprintf(e.stdout, "run %s is not quarantined: every message of its log folds\n", run)
	} else {
		fmt.Fprintf(e.stdout, "run %s is quarantined by the message at stream sequence %d\n  problem: %s\n  subject: %s\n", run, shown.Seq, shown.Problem, shown.Subject)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range shown.Headers {
				if !yield(k) {
					return
				}
			}
		}) {
			for _, v := range shown.Headers[k] {
				fmt.Fprintf(e.stdout, "  header:  %s: %s\n", k, v)
			}
		}
		fmt.Fprintf(e.stdout, "  body (%d bytes): %s\n", shown.Bytes, shown.Body)
		fmt.Fprintf(e.stdout, "to void it: weft repair drop %s --seq %d --reason '...'\n", run, shown.Seq)
	}
	for i, v := range voids {
		fmt.Fprintf(e.stdout, "voided: sequence %d (%d bytes, sha256 %s) %s at %s: %s (record at sequence %d)\n",
			v.Seq, v.Bytes, v.SHA256, checks[i].describe(), v.Recorded.Format(time.RFC3339), v.Reason, v.At)
	}
	return voidsNotVerified(run, voids, checks)
}

// voidsNotVerified is repair show's answer when a void record of run
// claims a signed proof that does not verify: the exit code audit verify
// gives the same record (exitAudit, docs/cli.md), its message starting
// with the same kind (proof); nil otherwise.
func voidsNotVerified(run string, voids []eventlog.VoidRecord, checks []voidChecked) error {
	for i, c := range checks {
		if c.Problem != "" {
			return auditError{fmt.Sprintf("proof: run %s: the void of the message at stream sequence %d (record at sequence %d): its signed proof does not verify (%s); weft audit verify %s checks the whole history",
				run, voids[i].Seq, voids[i].At, c.Problem, run)}
		}
	}
	return nil
}

// printable quotes b when it is not valid UTF-8 text.
func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strconv.QuoteToASCII(string(b))
}

// signVoid signs the void of the message at stream sequence seq of run for
// reason with the --signing-key (nil without one: the name given is
// recorded unverified), over the SHA-256 of the message's body as the log
// holds it (proof.VoidSubject), and says on w exactly what it signs.
func signVoid(ctx context.Context, w io.Writer, log *eventlog.Log, sf *signFlags, run string, seq uint64, reason string) (*events.CommandProof, error) {
	if sf.key == "" {
		return nil, nil
	}
	m, err := log.Message(ctx, seq)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(m.Data)
	fmt.Fprintf(w, "signing the void of the message at stream sequence %d (%d bytes, sha256 %x)\n", seq, len(m.Data), sum)
	return signCommand(w, sf, proof.VoidSubject(run, seq, hex.EncodeToString(sum[:]), reason))
}
