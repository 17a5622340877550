// Package audit proves what a run did: it exports a run's history as JSON
// lines and verifies a history — live from the log or from an exported file.
//
// Verify checks, in order, and reports the first problem it finds:
//
//  1. every line is an event envelope of the same run, versions 1, 2, 3, …;
//  2. the hash chain: event 1 has no Prev, and every later event's Prev is
//     the Hash (events.Envelope.Hash) of the event before it, so changing any
//     byte of an event (other than the last) breaks the link after it; the
//     last event is covered when the expected head hash is known (WithHead,
//     which a live verification takes from the log);
//     2b. every signed head (events.HeadSigned) signs the event just before
//     it with a signature that verifies (kind "signature"); with WithTrust
//     its key is one the auditor named ("untrusted"), and at least one
//     head is signed ("unsigned"); every head named by WithHeadAt is in
//     the history ("head": it was rewritten, or cut before it) and, unless
//     WithUnfinished, is its last event ("head": nobody vouches for the
//     events after it) — heads.go;
//  3. every payload decodes with the event catalogue;
//  4. the history refolds through the decision core (aggregate.Evolve never
//     meets an impossible transition), and every signed approval proof
//     recorded with an answer (events.ApprovalAnswered.Proof) verifies
//     against what the log records before it — the run, the pending
//     request, the call's tool and arguments, the answer — with its
//     signature, was not expired at the answer's recorded time and was not
//     used by an earlier answer (package proof), so an approved call
//     altered afterwards is detected even when the hash chain was
//     rewritten to match; every command proof recorded with a person's
//     command verifies against its event, and none is recorded twice
//     (proof_used: a replayed pause proof, say; the problem names the run,
//     the event, the key, the proof's digest and the event that used it
//     first);
//     4b. with WithPeople, every person's command recorded verified is
//     signed by a key the auditor names as a person's, under the name
//     given, and with WithTrust by no runner's head key ("untrusted": a
//     stranger's key, a name edited, a runner's key) — people.go;
//  5. the projection's view (projections.Fold) agrees with the aggregate on
//     status, the approvals and uncertain lists, turns, tokens, incarnation
//     and every action's state and attempts;
//  6. with WithTrust and no head named, the history ends with a signed
//     head over a finished run ("unsigned": it was cut back to an earlier
//     signed head, or events were added after the last one); with
//     WithUnfinished only a run that ended must end so;
//  7. when the stored view is given (WithView, from the weft_views bucket), it
//     is byte for byte the view refolded from the history.
//
// The package is pure apart from its io.Reader and io.Writer arguments.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
)

// Export writes envs as JSON lines, one envelope per line, in the encoding
// the log stores (the encoding events.Envelope.Hash hashes).
func Export(w io.Writer, envs []events.Envelope) error {
	bw := bufio.NewWriter(w)
	for _, env := range envs {
		b, err := json.Marshal(env)
		if err != nil {
			return fmt.Errorf("audit: export %s version %d: %w", env.Run, env.Version, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// ReadExport reads an exported history. A line that is not an envelope is a
// *Problem of kind "parse" naming the line.
func ReadExport(r io.Reader) ([]events.Envelope, error) {
	var out []events.Envelope
	err := eachLine(r, func(line int, b []byte) error {
		var env events.Envelope
		if err := decodeStrict(b, &env); err != nil {
			return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is not an event envelope: %v", line, err)}
		}
		out = append(out, env)
		return nil
	})
	return out, err
}

// eachLine calls fn with each non-blank line of an export (trimmed) and its
// number, until fn returns an error.
func eachLine(r io.Reader, fn func(line int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := fn(line, b); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit: read export: %w", err)
	}
	return nil
}

// decodeStrict decodes one line into v, refusing fields v lacks.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// The kinds of Problem.
const (
	// KindParse means a line of an export is not an envelope.
	KindParse = "parse"
	// KindEmpty means no events.
	KindEmpty = "empty"
	// KindSequence means another run's event, or versions not 1, 2, 3, ….
	KindSequence = "sequence"
	// KindChain means a hash link is broken.
	KindChain = "chain"
	// KindHead means the last event does not hash to the expected head.
	KindHead = "head"
	// KindDecode means a payload does not decode.
	KindDecode = "decode"
	// KindRefold means the decision core refuses the history.
	KindRefold = "refold"
	// KindMismatch means the projection disagrees with the aggregate.
	KindMismatch = "mismatch"
	// KindView means the stored view differs from the refolded one.
	KindView = "view"
	// KindProof means a recorded signed approval proof or command proof
	// does not verify, or an event says the deployment vouched for who made
	// it without a proof that verifies.
	KindProof = "proof"
	// KindSignature means a signed head (events.HeadSigned) does not
	// verify: its signature, or the head it signs is not the history's.
	KindSignature = "signature"
	// KindUntrusted means a head is signed by a key the auditor does not
	// trust (WithTrust), or a person's command or a void recorded verified
	// is signed by a key the auditor does not name as a person's, or by a
	// runner's head key, or is recorded under a name the auditor does not
	// give its key (WithPeople).
	KindUntrusted = "untrusted"
	// KindUnsigned means the auditor requires signed heads (WithTrust) and
	// the history has none, or a run that ended lacks its signed end head.
	KindUnsigned = "unsigned"
	// KindFork means a restarted run's link to its parent does not hold:
	// the parent's history given (WithParent) is another run's, lacks the
	// version the fork read, or hashes there to another chain hash than
	// the fork recorded.
	KindFork = "fork"
)

// ProofCheck is the re-check of one signed proof: an approval proof
// recorded with an answer, or a command proof recorded with a reconcile,
// resolve or cancel (Command; docs/security.md, "Who did it"). It says who
// signed it (Key, and the Reviewer — for a command the name recorded — and
// Verifier the answer names) and whether it verifies (Reason says why not).
type ProofCheck struct {
	Version  uint64 `json:"version"`
	Action   string `json:"action,omitempty"`
	Revision int    `json:"revision,omitempty"`
	Answer   string `json:"answer,omitempty"`
	Command  string `json:"command,omitempty"`
	Key      string `json:"key"`
	// Digest is a command proof's digest (proof.CommandDigest, lowercase
	// hex): what a proof is told apart by, as the runtime consumes it.
	Digest   string `json:"digest,omitempty"`
	Reviewer string `json:"reviewer,omitempty"`
	Verifier string `json:"verifier,omitempty"`
	Verified bool   `json:"verified"`
	Reason   string `json:"reason,omitempty"`
	// UsedAt is the version of the earlier event that recorded the same
	// command proof (0: none): the proof was used twice (proof_used).
	UsedAt uint64 `json:"used_at,omitempty"`
	// ReasonUnsigned says the answer gives a reason its approval proof
	// does not state (a proof signed before proofs stated reasons): the
	// proof verifies, but only the log vouches for the reason.
	ReasonUnsigned bool `json:"reason_unsigned,omitempty"`
	// Trusted says the key is one the auditor names as a person's
	// (WithPeople).
	Trusted bool `json:"trusted,omitempty"`
}

// Problem is the first thing wrong with a history. Version (and ID) name the
// event at fault, Line the exported line when reading a file.
type Problem struct {
	Kind    string `json:"kind"`
	Version uint64 `json:"version,omitempty"`
	ID      string `json:"id,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// Error returns the problem's message.
func (p *Problem) Error() string { return p.Kind + ": " + p.Message }

// Report is the result of Verify.
type Report struct {
	Run     string `json:"run"`
	Events  int    `json:"events"`
	Head    string `json:"head,omitempty"`
	Status  string `json:"status,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	// Proofs are the signed approval proofs re-checked, in log order (up to
	// the first problem).
	Proofs []ProofCheck `json:"proofs,omitempty"`
	// Heads are the signed heads checked, in log order (up to the first
	// problem); SignedThrough is the last version a signed head covers
	// (0: none), so the events after it are vouched for by nobody.
	Heads         []HeadCheck `json:"heads,omitempty"`
	SignedThrough uint64      `json:"signed_through,omitempty"`
	// PeopleChecked says the auditor named people's keys (WithPeople), so
	// each verified proof's Trusted says whether its key is one; without
	// them the people's keys are not checked.
	PeopleChecked bool `json:"people_checked,omitempty"`
	// Voids are the repairs of the run checked (a live verification's
	// void records, CheckVoid), in log order.
	Voids []VoidCheck `json:"voids,omitempty"`
	// Holds are the run's legal holds checked (weft_holds, or an export's
	// hold lines: CheckHolds), in the order placed: who placed and
	// released each, verified or not.
	Holds []HoldCheck `json:"holds,omitempty"`
	// HoldsUnknown says why the run's legal holds could not be read (live:
	// weft_holds refused or unreadable; --file: the export's holds_unread
	// line): then Holds says nothing of who held the run. Not a problem:
	// what was read is still checked.
	HoldsUnknown string `json:"holds_unknown,omitempty"`
	// Fork is the link of a run restarted from another to its parent
	// (nil: not a restarted run), checked when the parent's history was
	// given (WithParent).
	Fork *ForkCheck `json:"fork,omitempty"`
	// Problem is nil when the history verified.
	Problem *Problem `json:"problem,omitempty"`
}

// ForkCheck is the check of a restarted run's link to its parent
// (events.RunForked: docs/semantics.md §14): the parent's chain hash the
// fork recorded at the version it read, against the parent's history.
type ForkCheck struct {
	Parent  string `json:"parent"`
	Version uint64 `json:"version"`
	// Hash is the parent's chain hash the fork recorded ("" in a fork
	// recorded before forks recorded it).
	Hash string `json:"hash,omitempty"`
	// Checked says the parent's history was given and its event Version
	// hashes to Hash. When false, Unchecked says why (the link is then
	// neither confirmed nor refused).
	Checked   bool   `json:"checked"`
	Unchecked string `json:"unchecked,omitempty"`
}

// OK reports whether the history verified.
func (r Report) OK() bool { return r.Problem == nil }

type config struct {
	head       string
	view       []byte
	at         []headAt
	trust      map[string]bool     // nil: no keys named (WithTrust)
	people     map[string][]string // nil: people's keys not checked (WithPeople)
	unfinished bool                // WithUnfinished
	parent     []events.Envelope   // nil: the parent's history not given (WithParent)
}

// WithParent gives the history of the run a restarted run was forked from
// (its parent's events, as its log or export holds them), so that Verify
// checks the fork's link: the parent's event at the version the fork read
// hashes to the chain hash the fork recorded (ForkCheck). Verify the
// parent itself too: the link says the child continues that history, not
// that the history is intact. It is ignored for a run that was not
// restarted.
func WithParent(parent []events.Envelope) Option {
	return func(c *config) { c.parent = parent }
}

// Option adds a check to Verify.
type Option func(*config)

// WithHead checks that the last event hashes to head (the run's head hash as
// the log reports it), which covers the last event too.
func WithHead(head string) Option { return func(c *config) { c.head = head } }

// WithView compares the stored view (its encoded bytes, as in weft_views)
// with the view refolded from the history.
func WithView(view []byte) Option { return func(c *config) { c.view = view } }

// Verify checks envs as the package doc describes and reports the first
// problem.
func Verify(envs []events.Envelope, opts ...Option) Report {
	var c config
	for _, o := range opts {
		o(&c)
	}
	var rep Report
	if len(envs) == 0 {
		rep.Problem = &Problem{Kind: KindEmpty, Message: "the history has no events"}
		return rep
	}
	rep.Run = envs[0].Run
	rep.Events = len(envs)
	rep.PeopleChecked = c.people != nil

	// 1 and 2: sequence and chain.
	hashes := make([]string, len(envs))
	for i, env := range envs {
		hashes[i] = env.Hash()
		want := uint64(i + 1)
		switch {
		case env.Run != rep.Run:
			return fail(rep, KindSequence, env, "event %d (version %d) belongs to run %q, not %q", i+1, env.Version, env.Run, rep.Run)
		case env.Version != want:
			return fail(rep, KindSequence, env, "event %d has version %d, want %d (an event is missing, repeated or out of order)", i+1, env.Version, want)
		case i == 0 && env.Prev != "":
			return fail(rep, KindChain, env, "event 1 (%s) carries prev %s, but the chain starts at the run's first event", env.ID, short(env.Prev))
		case i > 0 && env.Prev != hashes[i-1]:
			prev := envs[i-1]
			return fail(rep, KindChain, prev,
				"event %d (%s, %s) does not hash to the prev recorded by event %d: it was altered (or event %d's prev was): hash %s, recorded %s",
				prev.Version, prev.ID, prev.Type, env.Version, env.Version, short(hashes[i-1]), short(env.Prev))
		}
	}
	rep.Head = hashes[len(hashes)-1]
	if c.head != "" && c.head != rep.Head {
		last := envs[len(envs)-1]
		return fail(rep, KindHead, last, "the last event %d (%s, %s) hashes to %s, but the run's head is %s: it was altered, or the history is incomplete",
			last.Version, last.ID, last.Type, short(rep.Head), short(c.head))
	}

	// 2b: signed heads and named heads (heads.go).
	if p := checkHeads(&rep, c, envs, hashes); p != nil {
		rep.Problem = p
		return rep
	}

	// 3: decode.
	recs := make([]events.Recorded, len(envs))
	for i, env := range envs {
		ev, err := env.Event()
		if err != nil {
			return fail(rep, KindDecode, env, "event %d (%s, %s) does not decode: %v", env.Version, env.ID, env.Type, err)
		}
		recs[i] = events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev}
		if f, ok := ev.(events.RunForked); ok {
			if p := checkFork(&rep, c, env, f.From); p != nil {
				rep.Problem = p
				return rep
			}
		}
	}

	// 4: refold through the aggregate, one event at a time, so that an
	// impossible transition names its event.
	// Who made each person's command, checked as the view checks it.
	deeds := map[uint64]projections.Deed{}
	for _, d := range projections.Deeds(recs) {
		deeds[d.Version] = d
	}
	var st aggregate.State
	for i, r := range recs {
		if ans, ok := r.Event.(events.ApprovalAnswered); ok && ans.Proof != nil {
			pc := checkProof(st, r, ans)
			rep.Proofs = append(rep.Proofs, pc)
			if !pc.Verified {
				return fail(rep, KindProof, envs[i], "event %d (%s, %s): the signed proof by %s of the %s of action %s revision %d does not verify: %s",
					r.Version, envs[i].ID, envs[i].Type, ans.Proof.Key, ans.Answer, ans.Action, ans.Revision, pc.Reason)
			}
		} else if pc, ok := checkCommand(st, r, deeds[r.Version]); ok {
			rep.Proofs = append(rep.Proofs, pc)
			if pc.UsedAt != 0 {
				return fail(rep, KindProof, envs[i], "run %s event %d (%s, %s): the %s by %s reuses the command proof (key %s, digest %s) already recorded with event %d: a proof is consumed once (%s)",
					rep.Run, r.Version, envs[i].ID, envs[i].Type, pc.Command, pc.Reviewer, pc.Key, pc.Digest, pc.UsedAt, proof.ReasonProofUsed)
			}
			if !pc.Verified {
				return fail(rep, KindProof, envs[i], "event %d (%s, %s): the %s by %s (key %s) does not verify: %s",
					r.Version, envs[i].ID, envs[i].Type, pc.Command, pc.Reviewer, pc.Key, pc.Reason)
			}
		}
		if d := deeds[r.Version]; d.Claimed && d.Problem != "" {
			return fail(rep, KindProof, envs[i], "event %d (%s, %s): %s says the deployment vouched for %q, but %s",
				r.Version, envs[i].ID, envs[i].Type, d.What, d.Who.By, d.Problem)
		}
		var pc *ProofCheck
		if n := len(rep.Proofs); n > 0 && rep.Proofs[n-1].Version == r.Version {
			pc = &rep.Proofs[n-1]
		}
		if p := checkPerson(c, envs[i], deeds[r.Version], pc); p != nil {
			rep.Problem = p
			return rep
		}
		if p := evolve(&st, r); p != "" {
			return fail(rep, KindRefold, envs[i], "event %d (%s, %s) is impossible after the ones before it: %s", r.Version, envs[i].ID, envs[i].Type, p)
		}
	}

	// 5: projection against aggregate.
	view := projections.Fold(recs)
	rep.Status = view.Status
	if view.Outcome != nil {
		rep.Outcome = view.Outcome.Kind
	}
	if msg := compare(view, st); msg != "" {
		return fail(rep, KindMismatch, envs[len(envs)-1], "the projection disagrees with the decision core: %s", msg)
	}
	if p := checkEnd(rep, c, envs, aggregate.Status(st).Kind == aggregate.StatusFinished); p != nil {
		rep.Problem = p
		return rep
	}

	// 7: the stored view.
	if c.view != nil {
		want, _ := view.Encode()
		if !bytes.Equal(c.view, want) {
			stored, err := projections.DecodeView(c.view)
			msg := "the stored view differs from the view refolded from the history"
			if err == nil {
				msg += fmt.Sprintf(" (stored version %d status %s; refolded version %d status %s)", stored.Version, stored.Status, view.Version, view.Status)
				if bytes.Equal(mustEncode(withoutWho(stored)), mustEncode(withoutWho(view))) {
					msg += "; it differs only in who made the people's commands, which views written before the runtime recorded them lack (docs/security.md, \"Who did it\"): run `weft rebuild` after the upgrade"
				}
			}
			return fail(rep, KindView, envs[len(envs)-1], "%s", msg)
		}
	}
	return rep
}

// withoutWho is v without who made the people's commands (who reconciled,
// resolved and cancelled, whether an answer is verified): the fields a
// view written before the runtime recorded them lacks, as the projector
// applies only new events to a stored view.
func withoutWho(v projections.RunView) projections.RunView {
	v.Cancelled = nil
	actions := make([]projections.ActionView, len(v.Actions))
	for i, a := range v.Actions {
		a.Reconciled = nil
		if a.Question != nil {
			q := *a.Question
			q.Verified = false
			if q.Resolution != nil {
				r := *q.Resolution
				r.Verified, r.Reason, r.Key = false, "", ""
				q.Resolution = &r
			}
			a.Question = &q
		}
		a.Approvals = append([]projections.ApprovalView{}, a.Approvals...)
		for j := range a.Approvals {
			a.Approvals[j].Verified = false
		}
		actions[i] = a
	}
	v.Actions = actions
	return v
}

func mustEncode(v projections.RunView) []byte {
	b, _ := v.Encode()
	return b
}

// checkProof re-checks the signed proof of ans against st, the run as
// the log records it just before ans (recorded at r.At).
func checkProof(st aggregate.State, r events.Recorded, ans events.ApprovalAnswered) ProofCheck {
	p := *ans.Proof
	pc := ProofCheck{Version: r.Version, Action: ans.Action, Revision: ans.Revision, Answer: ans.Answer, Key: p.Key, Reviewer: ans.Reviewer, Verifier: ans.Verifier}
	a, ok := st.Action(ans.Action)
	if !ok {
		pc.Reason = "the log has no such action before the answer"
		return pc
	}
	subject := proof.Subject{Run: st.Run(), Action: a.ID, Revision: a.Request.Revision, Requirement: a.Request.Requirement, Tool: a.Tool, Arguments: a.Arguments, Answer: ans.Answer, Reason: ans.Reason}.WithApproved(ans.Arguments, a.Edited)
	pc.ReasonUnsigned = !proof.CoversReason(p, subject)
	if err := proof.Check(p, subject, r.At); err != nil {
		pc.Reason = err.Error()
		return pc
	}
	if err := aggregate.CheckUnused(st, &p); err != nil {
		pc.Reason = err.Error()
		return pc
	}
	pc.Verified = true
	return pc
}

// checkCommand is the re-check of the command proof recorded with the
// reconcile, resolve, cancel, pause, resume or restart r (d: who made it, as the
// view checks it; st: the run as the log records it before r); false for
// any other event, or one that claims no verified identity. A proof st
// already recorded is not verified, and UsedAt names the event that used
// it: a command proof is consumed once (aggregate.CheckCommandUnused), so
// only a log edited afterwards, or written by a runner without that check,
// records one twice.
func checkCommand(st aggregate.State, r events.Recorded, d projections.Deed) (ProofCheck, bool) {
	pc := ProofCheck{Version: r.Version, Reviewer: d.Who.By, Verified: d.Who.Verified, Reason: d.Problem}
	var id events.Identity
	var p *events.CommandProof
	switch e := r.Event.(type) {
	case events.Reconciled:
		pc.Action, pc.Command, id, p = e.Action, proof.CommandReconcile, e.Identity, e.Proof
		if e.Stored {
			pc.Command = proof.CommandReconcileStored
		}
	case events.Resolved:
		pc.Action, pc.Command, id, p = e.Action, proof.CommandResolve, e.Identity, e.Proof
	case events.CancelRequested:
		pc.Command, id, p = proof.CommandCancel, e.Identity, e.Proof
	case events.RunPaused:
		pc.Command, id, p = proof.CommandPause, e.Identity, e.Proof
	case events.RunResumed:
		pc.Command, id, p = proof.CommandResume, e.Identity, e.Proof
	case events.RunForked:
		pc.Command, id, p = proof.CommandRestart, e.Identity, e.Proof
	default:
		return ProofCheck{}, false
	}
	if !d.Claimed {
		return ProofCheck{}, false
	}
	pc.Key = id.Key
	if p != nil {
		pc.Key = p.Key
		pc.Digest = fmt.Sprintf("%x", proof.CommandDigest(*p))
		if u, used := aggregate.CommandProofUsed(st, p); used {
			pc.Verified, pc.UsedAt = false, u.Version
			pc.Reason = fmt.Sprintf("%s: this command proof was already recorded with %s at version %d", proof.ReasonProofUsed, u.Event, u.Version)
		}
	}
	return pc, true
}

func fail(rep Report, kind string, env events.Envelope, format string, args ...any) Report {
	rep.Problem = problem(kind, env, format, args...)
	return rep
}

func problem(kind string, env events.Envelope, format string, args ...any) *Problem {
	return &Problem{Kind: kind, Version: env.Version, ID: env.ID, Message: fmt.Sprintf(format, args...)}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// evolve applies r, turning a panic of the aggregate into a message.
func evolve(st *aggregate.State, r events.Recorded) (problem string) {
	defer func() {
		if p := recover(); p != nil {
			problem = fmt.Sprint(p)
		}
	}()
	*st = aggregate.Evolve(*st, r)
	return ""
}

// compare returns "" when the view agrees with the aggregate's state.
func compare(v projections.RunView, st aggregate.State) string {
	s := aggregate.Status(st)
	if string(s.Kind) != v.Status {
		return fmt.Sprintf("status %s, decision core %s", v.Status, s.Kind)
	}
	if s.Kind != aggregate.StatusFinished && !slices.Equal(orEmpty(s.Approvals), v.Approvals) {
		return fmt.Sprintf("approvals %v, decision core %v", v.Approvals, s.Approvals)
	}
	if !slices.Equal(orEmpty(s.Uncertain), v.Uncertain) {
		return fmt.Sprintf("uncertain %v, decision core %v", v.Uncertain, s.Uncertain)
	}
	if v.Turns != st.Turn() {
		return fmt.Sprintf("turns %d, decision core %d", v.Turns, st.Turn())
	}
	if tokens := v.Usage.InputTokens + v.Usage.OutputTokens; tokens != st.TokensUsed() || v.Usage.Unreported != st.UnreportedReplies() {
		return fmt.Sprintf("tokens %d (%d unreported), decision core %d (%d unreported)", tokens, v.Usage.Unreported, st.TokensUsed(), st.UnreportedReplies())
	}
	if v.Incarnation != st.Incarnation() {
		return fmt.Sprintf("incarnation %d, decision core %d", v.Incarnation, st.Incarnation())
	}
	acts := st.Actions()
	if len(acts) != len(v.Actions) {
		return fmt.Sprintf("%d actions, decision core %d", len(v.Actions), len(acts))
	}
	for i, a := range acts {
		w := v.Actions[i]
		if a.ID != w.ID || string(a.State) != w.State || a.Attempts != w.Attempts {
			return fmt.Sprintf("action %s %s after %d attempts, decision core %s %s after %d", w.ID, w.State, w.Attempts, a.ID, a.State, a.Attempts)
		}
	}
	return ""
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// checkFork records in rep the link of a fork to its parent (from) and
// checks it against the parent's history when given (WithParent).
func checkFork(rep *Report, c config, env events.Envelope, from events.ForkedFrom) *Problem {
	fc := &ForkCheck{Parent: from.Run, Version: from.Version, Hash: from.Hash}
	rep.Fork = fc
	switch {
	case from.Hash == "":
		fc.Unchecked = "the fork recorded no chain hash of its parent (recorded before forks recorded it, or by an older runner)"
		return nil
	case c.parent == nil:
		fc.Unchecked = "the parent's history was not given"
		return nil
	}
	for _, p := range c.parent {
		if p.Run != from.Run {
			return problem(KindFork, env, "event %d (%s, %s): the parent's history given is run %s's, not %s's", env.Version, env.ID, env.Type, p.Run, from.Run)
		}
		if p.Version != from.Version {
			continue
		}
		if h := p.Hash(); h != from.Hash {
			return problem(KindFork, env, "event %d (%s, %s): the fork recorded %s's chain hash at version %d as %s, but the parent's history given hashes there to %s: the child does not continue that history (or one of them was altered)",
				env.Version, env.ID, env.Type, from.Run, from.Version, short(from.Hash), short(h))
		}
		fc.Checked = true
		return nil
	}
	return problem(KindFork, env, "event %d (%s, %s): the fork read %s at version %d, but the parent's history given has no event %d (%d events)", env.Version, env.ID, env.Type, from.Run, from.Version, from.Version, len(c.parent))
}
