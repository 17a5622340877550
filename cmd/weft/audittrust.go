package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// keyList is a repeatable flag of nkey user public keys; each value may
// also hold several keys separated by commas.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(s string) error {
	for _, key := range strings.Split(s, ",") {
		key = strings.TrimSpace(key)
		if _, err := proof.PublicKey(key); err != nil {
			return fmt.Errorf("key %q: %v", key, err)
		}
		*k = append(*k, key)
	}
	return nil
}

// readTrustFile reads a trust file: a runner's head key, one nkey user
// public key ("U…") a line, optionally followed by a name; or a person's
// key, "person U… NAME", NAME being a name the deployment records for the
// commands the key signs (the rest of the line, as written; none: any
// name; a key on several person lines has each name). Blank lines and
// lines starting with # are skipped.
func readTrustFile(path string) (runners []string, people map[string][]string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	people = map[string][]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		first, rest := cutField(sc.Text())
		if first == "" || strings.HasPrefix(first, "#") {
			continue
		}
		person := first == "person"
		if person {
			if first, rest = cutField(rest); first == "" {
				return nil, nil, usagef("--trust-file %s line %d: want person KEY [NAME]", path, line)
			}
		}
		if _, err := proof.PublicKey(first); err != nil {
			return nil, nil, usagef("--trust-file %s line %d: %q: %v", path, line, first, err)
		}
		if person {
			people[first] = append(people[first], rest)
		} else {
			runners = append(runners, first)
		}
	}
	return runners, people, sc.Err()
}

// cutField splits s at its first run of white space: its first word and
// the rest, trimmed (inner spacing kept).
func cutField(s string) (first, rest string) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// verifyOptions turns the audit verify flags into audit options; trusted
// reports whether the auditor named keys. --trust names runners' head
// keys only: the people's keys are checked (audit.WithPeople: every
// person's command recorded verified must be signed by a person's key the
// auditor names) only when the auditor names some, with --people or
// `person` lines in the trust file; else printPeopleNotes lists the keys
// not checked.
func verifyOptions(trust keyList, trustFile string, peopleFiles []string, unfinished bool) (opts []audit.Option, trusted bool, err error) {
	if unfinished {
		opts = append(opts, audit.WithUnfinished())
	}
	keys := append([]string(nil), trust...)
	people := map[string][]string{}
	if trustFile != "" {
		more, persons, err := readTrustFile(trustFile)
		if err != nil {
			return nil, false, err
		}
		if len(more) == 0 && len(persons) == 0 {
			return nil, false, usagef("--trust-file %s names no key", trustFile)
		}
		keys = append(keys, more...)
		for k, names := range persons {
			people[k] = append(people[k], names...)
		}
	}
	for _, f := range peopleFiles {
		persons, err := approvers.ReadKeys(f)
		if err != nil {
			return nil, false, usagef("--people: %v", err)
		}
		for _, k := range persons {
			people[k.Public] = append(people[k.Public], k.Name())
		}
	}
	if len(keys) > 0 {
		opts = append(opts, audit.WithTrust(keys...))
	}
	if len(peopleFiles) > 0 || len(people) > 0 {
		opts = append(opts, audit.WithPeople(people))
	}
	return opts, len(keys) > 0, nil
}

// printHeadChecks lists the signed heads audit verify checked and says how
// far the history is vouched for; headVersion is the version of the head
// named with --head (0: none).
func printHeadChecks(w io.Writer, rep audit.Report, trusted bool, headVersion uint64) {
	for _, h := range rep.Heads {
		who := "untrusted key"
		if h.Trusted {
			who = "trusted key"
		}
		fmt.Fprintf(w, "signed head: event %d signs %d:%s by %s %s (%s)\n", h.Version, h.Head, h.HeadHash, who, h.Key, orDash(h.Signer))
	}
	if !rep.OK() {
		return
	}
	switch {
	case len(rep.Heads) == 0:
		fmt.Fprintln(w, "note: no head is signed (the runner had no head key): nothing ties this history to a key; give --head from an independent source")
	case !trusted:
		fmt.Fprintln(w, "note: the signatures verify, but no key was named: anyone can sign; give --trust KEY or --trust-file")
	}
	if len(rep.Heads) > 0 && rep.SignedThrough < uint64(rep.Events) {
		fmt.Fprintf(w, "note: events %d to %d follow the last signed head (event %d): nobody vouches for them, and events after them may have been dropped; give --head from the live log\n", rep.SignedThrough+2, rep.Events, rep.SignedThrough+1)
	}
	if headVersion > 0 && headVersion < uint64(rep.Events) {
		fmt.Fprintf(w, "note: events %d to %d follow the head you named: nobody vouches for them\n", headVersion+1, rep.Events)
	}
}

// printPeopleNotes lists, when rep verified and the auditor named no
// person's key (rep.PeopleChecked), each person's command recorded with a
// signed proof, with its key: the proof verifies, but nothing says whose
// the key is.
func printPeopleNotes(w io.Writer, rep audit.Report) {
	if !rep.OK() || rep.PeopleChecked {
		return
	}
	for _, c := range rep.Proofs {
		what := c.Command
		switch {
		case c.Command == "":
			what = fmt.Sprintf("%s of action %s revision %d", c.Answer, c.Action, c.Revision)
		case c.Action != "":
			what += " of action " + c.Action
		}
		fmt.Fprintf(w, "note: event %d: the %s by %s is signed by key %s: not checked against people's keys (name them: --people FILE, or `person KEY NAME` lines in --trust-file)\n",
			c.Version, what, orDash(c.Reviewer), c.Key)
	}
}

// printSigners says which keys signed the exported history's heads (the
// keys' identities are in its head_signed events: key and signer), so the
// auditor knows which key to obtain independently and name with --trust.
func printSigners(w io.Writer, envs []events.Envelope) {
	seen := map[string]bool{}
	n := 0
	for _, env := range envs {
		if env.Type != events.NameHeadSigned {
			continue
		}
		ev, err := env.Event()
		if err != nil {
			continue
		}
		hs := ev.(events.HeadSigned)
		n++
		if !seen[hs.Key] {
			seen[hs.Key] = true
			fmt.Fprintf(w, "signed heads by key %s (%s)\n", hs.Key, orDash(hs.Signer))
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "note: no head of this history is signed (the runner had no head key)")
	}
}

// checkVoids lists on w the repairs of run (weft repair drop): each voided
// message, who voided it — verified by its signed proof or a typed name —
// and why, with the SHA-256 of the bytes it superseded; it returns rep
// with the first void whose identity does not verify, or is not a person's
// the auditor names (opts: audit.CheckVoid), as its problem when rep had
// none.
func checkVoids(w io.Writer, run string, voids []eventlog.VoidRecord, rep audit.Report, opts []audit.Option) audit.Report {
	for _, v := range voids {
		who, p := audit.CheckVoid(run, v, opts...)
		rep.Voids = append(rep.Voids, who)
		fmt.Fprintf(w, "note: repaired: the message at stream sequence %d (%d bytes, sha256 %s, %s) was voided %s at %s: %s (void record at sequence %d)\n",
			v.Seq, v.Bytes, v.SHA256, v.Problem, who.Describe(), v.Recorded.Format(time.RFC3339), v.Reason, v.At)
		if p != nil && rep.Problem == nil {
			rep.Problem = p
		}
	}
	return rep
}

// checkHolds checks who placed and released each legal hold of run
// (holds: weft_holds', or an export's hold lines; audit.CheckHolds) into
// rep.Holds, and returns rep with the first hold whose proof does not
// verify, or whose key is not a person's the auditor names (opts), as its
// problem when rep had none; unread (when not "") says why the holds
// could not be read (rep.HoldsUnknown).
func checkHolds(run string, holds []audit.Hold, unread string, rep audit.Report, opts []audit.Option) audit.Report {
	checks, p := audit.CheckHolds(run, holds, opts...)
	rep.Holds, rep.HoldsUnknown = checks, unread
	if p != nil && rep.Problem == nil {
		rep.Problem = p
	}
	return rep
}

// printHoldChecks prints who placed and released each legal hold of the
// run (rep.Holds): one `hold` line per placement and release, verified
// (with its key, and whether it is a person's key the auditor names) or
// unverified, or that its proof DOES NOT VERIFY; when no person's key was
// named, a note per verified one that its key was not checked against
// people's keys; a note when the holds could not be read
// (rep.HoldsUnknown), never silence that would read as "no hold".
func printHoldChecks(w io.Writer, rep audit.Report) {
	if rep.HoldsUnknown != "" {
		fmt.Fprintf(w, "note: the run's legal holds are unknown (%s): who placed and released them is not checked\n", rep.HoldsUnknown)
	}
	for _, h := range rep.Holds {
		state := "released"
		if h.Active {
			state = "active"
		}
		printHoldDeed(w, rep, h.ID, "placed", h.Placed, " ("+state+")")
		if h.Released != nil {
			printHoldDeed(w, rep, h.ID, "released", *h.Released, "")
		}
	}
}

func printHoldDeed(w io.Writer, rep audit.Report, id, what string, d audit.HoldDeed, tail string) {
	at := d.At.UTC().Format(time.RFC3339)
	if d.Problem != "" {
		fmt.Fprintf(w, "hold %s: %s by %q at %s: %s%s: its signed proof DOES NOT VERIFY: %s\n", id, what, d.By, at, d.Reason, tail, d.Problem)
		return
	}
	who := d.Describe()
	if d.Verified && d.Trusted {
		who = strings.TrimSuffix(who, ")") + ", a person's key you trust)"
	}
	fmt.Fprintf(w, "hold %s: %s %s at %s: %s%s\n", id, what, who, at, d.Reason, tail)
	if d.Verified && !rep.PeopleChecked && rep.OK() {
		fmt.Fprintf(w, "note: hold %s: the %s by %s is signed by key %s: not checked against people's keys (name them: --people FILE, or `person KEY NAME` lines in --trust-file)\n",
			id, map[string]string{"placed": "placement", "released": "release"}[what], orDash(d.By), d.Key)
	}
}
