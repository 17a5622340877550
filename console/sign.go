package console

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// A person's command — reconcile, resolve, cancel, pause, resume,
// restart, a legal hold and its release — is
// recorded verified when it carries a signed command proof by one of the
// deployment's person keys (docs/security.md, "Who did it"). The console
// never holds the key: the page's script signs in the browser what the
// console says the command is (the signing statement: the subject of
// proof.CommandSubject, its content as the canonical bytes whose SHA-256
// the proof states), or, without the script, the person runs the weft
// command the page shows (--print-proof) and pastes the proof. The runner
// checks the proof against the command the console then sends: a statement
// that lied would only get the proof refused.

// signing is the signing statement of a person's command: what its proof
// states, the console's clock, and the weft command that signs it.
type signing struct {
	Command string `json:"command"`
	Run     string `json:"run"`
	Action  string `json:"action,omitempty"`
	// Content is the command's canonical content bytes (proof.Canonical),
	// whose SHA-256 the proof states; empty for a cancel, pause or resume.
	Content string `json:"content,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Now is the console's clock (Unix milliseconds): the page sets the
	// proof's expiry from it, not from the viewer's clock.
	Now int64 `json:"now"`
	// Lifetime is how long the proof is valid from Now, in seconds
	// (signLifetime).
	Lifetime int `json:"lifetime"`
	// Weft is the command line that prints the same proof (--print-proof).
	Weft string `json:"weft"`
	// Path and Fields are the form to send again with the proof pasted
	// (the page without the script).
	Path   string      `json:"-"`
	Fields []hiddenVal `json:"-"`
}

// commandID sets the command id of the form to send again.
func (st *signing) commandID(id string) {
	for i := range st.Fields {
		if st.Fields[i].Name == "command_id" {
			st.Fields[i].Value = id
		}
	}
}

// hiddenVal is one field of a form sent again.
type hiddenVal struct{ Name, Value string }

// signLifetime is how long a proof the page signs is valid, from the
// console's clock: the trip to the runner, well within the default person
// key lifetime (approvers.DefaultLifetime).
const signLifetime = 30 * time.Second

// personCommand is a person's command read from its form: the subject its
// proof signs and the proof it carries (nil: the typed name, unverified).
type personCommand struct {
	s     proof.CommandSubject
	proof *events.CommandProof
}

// readPerson reads the proof of the form's command s, pasted or signed by
// the page's script. A form that asks for its signing statement (the
// field "prepare") is answered it and not sent; a proof that cannot be
// read is not sent either. ok is false when the form was answered.
func (c *Console) readPerson(w http.ResponseWriter, r *http.Request, s proof.CommandSubject) (personCommand, bool) {
	pc := personCommand{s: s}
	if r.PostForm.Get("prepare") != "" {
		st, err := c.signing(r, s)
		if err != nil {
			c.respond(w, r, notSent("The command's content cannot be signed: "+err.Error()+"."))
			return pc, false
		}
		c.respond(w, r, answer{Sign: st, Message: "Sign this command with your key, then send it with the proof."})
		return pc, false
	}
	text := strings.TrimSpace(r.PostForm.Get("proof"))
	if text == "" {
		return pc, true
	}
	var p events.CommandProof
	if err := json.Unmarshal([]byte(text), &p); err != nil || p.Key == "" || p.Signature == "" || p.Command == "" {
		c.respond(w, r, notSent("The signed proof could not be read: paste the whole line weft … --print-proof printed, or sign again."))
		return pc, false
	}
	pc.proof = &p
	return pc, true
}

// signing returns the signing statement of s, sent from the form of r.
func (c *Console) signing(r *http.Request, s proof.CommandSubject) (*signing, error) {
	st := &signing{Command: s.Command, Run: s.Run, Action: s.Action, Reason: s.Reason, Now: time.Now().UnixMilli(), Lifetime: int(signLifetime / time.Second), Path: r.URL.Path}
	if len(s.Content) > 0 {
		b, err := proof.Canonical(s.Content)
		if err != nil {
			return nil, err
		}
		st.Content = string(b)
	}
	st.Weft = weftCommand(s, st.Content)
	// Every field of the form, so that a field a form gains later is sent
	// again too, but the proof (pasted anew), prepare (the form is sent)
	// and any credential.
	for _, name := range slices.Sorted(maps.Keys(r.PostForm)) {
		if vs := r.PostForm[name]; len(vs) > 0 && name != "proof" && name != "prepare" && name != "credential" {
			st.Fields = append(st.Fields, hiddenVal{name, vs[0]})
		}
	}
	return st, nil
}

// weftCommand is the weft command line that prints the proof of s
// (content: its canonical bytes), with the key file left to the person.
func weftCommand(s proof.CommandSubject, content string) string {
	switch s.Command {
	case proof.CommandRestart, proof.CommandHold, proof.CommandReleaseHold:
		return keepCommand(s)
	}
	name, stored := s.Command, false
	if name == proof.CommandReconcileStored {
		name, stored = proof.CommandReconcile, true
	}
	args := []string{"weft", name, shellQuote(s.Run)}
	if s.Action != "" {
		args = append(args, shellQuote(s.Action))
	}
	if content != "" {
		flag, value := contentFlag(s.Command, content)
		args = append(args, flag, shellQuote(value))
	}
	if stored {
		args = append(args, "--stored")
	}
	if s.Reason != "" {
		args = append(args, "--reason", shellQuote(s.Reason))
	}
	return strings.Join(append(args, "--signing-key", "YOUR_KEY.nk", "--proof-ttl", shownTTL, "--print-proof"), " ")
}

// keepCommand is weftCommand of a restart (its content is the new run and
// the turn: proof.RestartSubject), a legal hold or its release.
func keepCommand(s proof.CommandSubject) string {
	var args []string
	switch s.Command {
	case proof.CommandRestart:
		var c struct {
			Run  string `json:"run"`
			Turn int64  `json:"turn"`
		}
		_ = json.Unmarshal(s.Content, &c)
		args = []string{"weft", "restart", shellQuote(s.Run), "--from-turn", strconv.FormatInt(c.Turn, 10), "--run", shellQuote(c.Run)}
	case proof.CommandHold:
		args = []string{"weft", "hold", shellQuote(s.Run)}
	default:
		args = []string{"weft", "hold", "--release"}
		if s.Action != "" {
			args = append(args, "--hold", shellQuote(s.Action))
		}
		args = append(args, shellQuote(s.Run))
	}
	if s.Reason != "" {
		args = append(args, "--reason", shellQuote(s.Reason))
	}
	return strings.Join(append(args, "--signing-key", "YOUR_KEY.nk", "--proof-ttl", shownTTL, "--print-proof"), " ")
}

// shownTTL is the --proof-ttl of the command weftCommand shows: the
// person keys' default lifetime (approvers.DefaultLifetime, 60 s) less a
// margin, so that a person's clock a little ahead of the runner's does
// not make the proof lifetime_exceeded.
const shownTTL = "45s"

// contentFlag is the weft flag and value that make exactly content (its
// canonical bytes): --error MESSAGE or --unconfirmed NOTE only when weft's
// encoding of that shortcut (json.Marshal of the one-member object, as
// cmd/weft builds it) is these bytes again, else --output with the bytes
// as they are (weft sends --output verbatim, and proof.Canonical of
// canonical bytes is the same bytes). Content such as {"error":"caf\u00e9"}
// keeps --output: --error 'café' would sign {"error":"café"}.
func contentFlag(command, content string) (flag, value string) {
	var shaped map[string]string
	if json.Unmarshal([]byte(content), &shaped) != nil || len(shaped) != 1 {
		return "--output", content
	}
	for key, flag := range map[string]string{"error": "--error", "unconfirmed": "--unconfirmed"} {
		v, ok := shaped[key]
		if !ok || (key == "unconfirmed" && command == proof.CommandResolve) {
			continue
		}
		if b, err := json.Marshal(map[string]string{key: v}); err == nil && string(b) == content {
			return flag, v
		}
	}
	return "--output", content
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@=+,-]+$`)

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// answerPerson answers a person's command that was sent: done (the
// command's reply rep; what it did, then what follows, link where to see
// it) when err is nil, naming the signing key; else the refusal — and, for
// a command refused for want of a verified identity, its signing
// statement, so that the page says how to sign it.
func (c *Console) answerPerson(w http.ResponseWriter, r *http.Request, pc personCommand, rep api.Reply, err error, what, then, link string) {
	if err != nil {
		c.respond(w, r, c.personRefused(r, pc, err, pc.s.Run, pc.s.Action))
		return
	}
	msg := what
	if pc.proof != nil {
		msg += " Signed with key " + pc.proof.Key + "."
	}
	c.respond(w, r, answer{OK: true, Status: rep.Status, Link: link, Message: msg + " " + then})
}

// personRefused is the answer to the person's command pc refused with err
// (the run and action it names) — and, for a command refused for want of
// a verified identity, its signing statement, so that the page says how
// to sign it.
func (c *Console) personRefused(r *http.Request, pc personCommand, err error, run, action string) answer {
	a := c.answerErr(r, err, run, action)
	var we *weft.Error
	if pc.proof == nil && errors.As(err, &we) && we.Code == weft.CodeIdentityRequired && we.Reason == approvers.ReasonNoIdentity {
		// no_identity comes only from a deployment that requires
		// identities, which requires a reason too: a statement without
		// one would only be refused no_reason once signed.
		if pc.s.Reason == "" {
			a.Message += ". This deployment also requires a reason: write why in the form's reason, then sign it with your key (“Sign with your key” on the form)."
		} else if st, serr := c.signing(r, pc.s); serr == nil {
			a.Sign = st
			a.Message += ". Sign it with your key (“Sign with your key” on the form) to send it verified."
		}
	}
	return a
}
