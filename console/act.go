package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// answer is what an action answers: JSON to the script, a page with a
// flash without it.
type answer struct {
	OK bool `json:"ok"`
	// Code, Reason and Message are the refusal's (Code empty: the form was
	// not sent, Message says why).
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
	// Status is the run's status after the command.
	Status string `json:"status,omitempty"`
	// Link is where to see the outcome (a started run).
	Link string `json:"link,omitempty"`
	// NextCommandID replaces the form's command id after a refusal (the
	// command API keeps a refusal for its command id, so a corrected form
	// needs a new one) and after a start (the form starts another run).
	// Never after an answer whose outcome is not known (Unknown).
	NextCommandID string `json:"next_command_id,omitempty"`
	// Unknown says that whether the command took effect is not known: it
	// got no answer, or outcome_unknown (Code). The form keeps its command
	// id, so that sending it again is applied at most once.
	Unknown bool `json:"unknown,omitempty"`
	// Run is the run id the form keeps after a start whose outcome is not
	// known (the console chose it when the form had none): sent again, the
	// start is the same run's.
	Run string `json:"run,omitempty"`
	// Sign is the signing statement of a person's command: the answer to
	// a form that asked for it (nothing sent), or with a refusal for want
	// of a verified identity.
	Sign *signing `json:"sign,omitempty"`
	// again is the start form to show again (a page without the script,
	// after a start whose outcome is not known).
	again *startForm
}

// maxForm bounds a form body (a reconciliation output may be large, but
// the command API refuses bodies over api.MaxBody).
const maxForm = api.MaxBody

// respond answers an action. A request from the script (Accept:
// application/json) gets the answer as JSON; a plain form post gets the
// page it came from (the return field) with the answer on top.
func (c *Console) respond(w http.ResponseWriter, r *http.Request, a answer, secrets ...string) {
	a.Message = redact(a.Message, secrets...)
	if !a.OK && !a.Unknown && (a.Sign == nil || a.Code != "") {
		a.NextCommandID = newCommandID()
		if a.Sign != nil {
			// The form to send again with the proof: the refusal is kept
			// for the command id sent.
			a.Sign.commandID(a.NextCommandID)
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		if !a.OK && (a.Sign == nil || a.Code != "") {
			w.WriteHeader(http.StatusConflict)
		}
		_ = json.NewEncoder(w).Encode(a)
		return
	}
	fl := &flash{OK: a.OK, Unknown: a.Unknown, Code: a.Code, Reason: a.Reason, Message: a.Message, Link: a.Link, Start: a.again, Sign: a.Sign}
	ret, err := url.Parse(r.PostFormValue("return"))
	if err != nil || !strings.HasPrefix(ret.Path, "/") || strings.HasPrefix(ret.Path, "//") || ret.Host != "" {
		ret = &url.URL{Path: "/"}
	}
	g := r.Clone(r.Context())
	g.Method, g.URL, g.Form, g.PostForm = http.MethodGet, ret, nil, nil
	switch {
	case ret.Path == "/runs":
		c.renderRuns(w, g, fl)
	case strings.HasPrefix(ret.Path, "/runs/"):
		g.SetPathValue("run", strings.TrimPrefix(ret.Path, "/runs/"))
		c.renderRun(w, g, fl)
	default:
		c.renderInbox(w, g, fl)
	}
}

// redact replaces every secret (a credential the viewer typed) in a
// message from the command API: an approver's refusal might quote it.
func redact(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "•••")
		}
	}
	return msg
}

// refused turns a command's error into an answer.
func refused(err error) answer {
	var we *weft.Error
	if errors.As(err, &we) {
		return answer{Code: string(we.Code), Reason: we.Reason, Message: we.Message}
	}
	return answer{Code: string(weft.CodeUnavailable), Message: err.Error()}
}

// notKnown reports whether err says that whether the command took effect
// is not known: outcome_unknown, or no answer (an error without a code —
// the request's deadline, a lost connection — after which the command may
// have been applied, its answer lost). A coded answer is a refusal.
func notKnown(err error) bool {
	if errors.As(err, new(*weft.Error)) {
		return weft.ErrorCode(err) == weft.CodeOutcomeUnknown
	}
	return err != nil
}

// answerErr turns a command's error into an answer: a refusal (refused),
// or, when whether the command took effect is not known (notKnown), an
// answer that says so and what the run (ref, when the form names one)
// shows now, read as the CLI's unknownOutcome does. The form keeps its
// command id (docs/semantics.md §8: a run can always be answered — by reading
// it, never by a guess).
func (c *Console) answerErr(r *http.Request, err error, run, action string) answer {
	if !notKnown(err) {
		return refused(err)
	}
	a := answer{Unknown: true, Message: "Whether it took effect is not known: " + err.Error() + "."}
	if weft.ErrorCode(err) == weft.CodeOutcomeUnknown {
		we := asWeftError(err)
		a.Code, a.Reason, a.Message = string(we.Code), we.Reason, "Whether it took effect is not known: "+we.Message+"."
		a.Message += " Sending this form again answers the same: once the run shows that the command did not take effect, reload the page for a new form."
	} else {
		a.Message += " Sending this form again is safe: it keeps its command id, which is applied at most once."
	}
	if run == "" {
		return a
	}
	a.Link = runLink(run)
	// The action's context may be spent (no answer within it): the run is
	// read within a context of its own.
	ctx, cancel := c.ctx(r)
	defer cancel()
	v, rerr := c.client.Run(ctx, run)
	switch {
	case errors.Is(rerr, &weft.Error{Code: weft.CodeUnknownRun}):
		a.Message += " Read now: run " + run + " is not known (yet)."
	case rerr != nil:
		a.Message += " The run could not be read now (" + rerr.Error() + "): open it."
	default:
		now := " Read now: run " + run + " is " + v.Status
		if v.Outcome != nil {
			now += " (" + v.Outcome.Kind + ")"
		}
		if action != "" {
			if av, ok := v.Action(action); ok {
				now += "; action " + action + " is " + av.State
			} else {
				now += "; it has no action " + action
			}
		}
		a.Message += now + " (the view may not have the command yet: open the run)."
	}
	return a
}

// notSent is the answer for a form the console did not send.
func notSent(msg string) answer { return answer{Message: msg} }

func (c *Console) form(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return false
	}
	return true
}

func runLink(run string) string { return "/runs/" + url.PathEscape(run) }

func describeStatus(run, status string) string {
	if status == "" {
		return "Done."
	}
	return "Run " + run + " is now " + status + "."
}

// actApproval approves or rejects a pending approval request (the button
// pressed is "decision").
func (c *Console) actApproval(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	credential := f.Get("credential")
	rev, err := strconv.Atoi(f.Get("revision"))
	if err != nil {
		c.respond(w, r, notSent("the form has no revision: reload the page"))
		return
	}
	run, action, approver := f.Get("run"), f.Get("action"), strings.TrimSpace(f.Get("approver"))
	// A signed proof comes from the page's script, which signed it with
	// the reviewer's key (never sent here); an approver of signed proofs
	// takes nothing else.
	var signed *events.ApprovalProof
	if text := strings.TrimSpace(f.Get("proof")); text != "" {
		signed = &events.ApprovalProof{}
		if err := json.Unmarshal([]byte(text), signed); err != nil {
			c.respond(w, r, notSent("The signed proof could not be read: reload the page and sign again."))
			return
		}
		credential = ""
	} else if e, err := c.entry(ctx, events.AgentRef{Name: f.Get("agent"), Version: f.Get("version")}); err == nil {
		if _, ok := e.SignedApprover(approver); ok {
			c.respond(w, r, notSent("The approver "+approver+" takes a signed proof, which this page makes with your signing key: it needs JavaScript (or use weft approve --signing-key)."))
			return
		}
	}
	signedBy := ""
	if signed != nil {
		signedBy = " Signed with key " + signed.Key + "."
	}
	switch f.Get("decision") {
	case "approve":
		if credential == "" && signed == nil {
			c.respond(w, r, notSent("Type your credential to approve."))
			return
		}
		edit, ok := editedArguments(f)
		if !ok {
			c.respond(w, r, notSent("The edited arguments are not JSON: correct them, or close “Approve with changes” to approve the call as asked."))
			return
		}
		rep, err := c.client.Approve(ctx, api.ApproveRequest{CommandID: f.Get("command_id"), Run: run, Action: action, Revision: rev, Approver: approver, Credential: credential, Proof: signed, Arguments: edit})
		if err != nil {
			c.respond(w, r, c.answerErr(r, err, run, action), credential)
			return
		}
		c.log.Info("console: approved", "run", run, "action", action, "revision", rev, "signed", signed != nil, "edited", edit != nil)
		what := "Approved."
		if edit != nil {
			what = "Approved with changes: the call runs with " + string(edit) + "."
		}
		c.respond(w, r, answer{OK: true, Status: rep.Status, Link: runLink(run), Message: what + signedBy + " " + describeStatus(run, rep.Status)})
	case "reject":
		reason := strings.TrimSpace(f.Get("reason"))
		if reason == "" {
			c.respond(w, r, notSent("Type a reason to reject: the model reads it."))
			return
		}
		req := api.RejectRequest{CommandID: f.Get("command_id"), Run: run, Action: action, Revision: rev, Reason: reason}
		if credential != "" || approver != "" || signed != nil {
			req.Approver, req.Credential, req.Proof = approver, credential, signed
		}
		rep, err := c.client.Reject(ctx, req)
		if err != nil {
			c.respond(w, r, c.answerErr(r, err, run, action), credential)
			return
		}
		c.log.Info("console: rejected", "run", run, "action", action, "revision", rev, "signed", signed != nil)
		c.respond(w, r, answer{OK: true, Status: rep.Status, Link: runLink(run), Message: "Rejected." + signedBy + " " + describeStatus(run, rep.Status)})
	default:
		c.respond(w, r, notSent("Press Approve or Reject."))
	}
}

// editedArguments reads the edited arguments of an approval form
// ("Approve with changes", docs/semantics.md §4, "Approving narrower
// arguments"): nil when the form has none, or when they are the arguments
// the call would run with anyway (the field runs_with, which the form
// starts from: approving them unchanged is approving as asked); ok is
// false when they are not JSON. They are sent compacted (proof.Canonical),
// the bytes whose hash the page's signed proof states.
func editedArguments(f url.Values) (json.RawMessage, bool) {
	text := strings.TrimSpace(f.Get("arguments"))
	if text == "" {
		return nil, true
	}
	edit, err := proof.Canonical(json.RawMessage(text))
	if err != nil {
		return nil, false
	}
	if asked, err := proof.Canonical(json.RawMessage(f.Get("runs_with"))); err == nil && bytes.Equal(asked, edit) {
		return nil, true
	}
	return edit, true
}

// actReconcile records what happened to an uncertain action: the tool's
// output (from the generated form), a failure, or unconfirmed.
func (c *Console) actReconcile(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	run, action := f.Get("run"), f.Get("action")
	var content json.RawMessage
	var what string
	switch f.Get("kind") {
	case "output":
		out, problem := c.readOutput(ctx, f)
		if problem != "" {
			c.respond(w, r, notSent(problem))
			return
		}
		content, what = out, "the tool's output"
	case "error":
		msg := strings.TrimSpace(f.Get("error"))
		if msg == "" {
			c.respond(w, r, notSent("Type what failed: the model reads it."))
			return
		}
		content, _ = json.Marshal(map[string]string{"error": msg})
		what = "a failure"
	case "unconfirmed":
		note := strings.TrimSpace(f.Get("note"))
		if note == "" {
			c.respond(w, r, notSent("Type a note: what is known, and who is finding out."))
			return
		}
		content, _ = json.Marshal(map[string]string{"unconfirmed": note})
		what = "unconfirmed"
	default:
		c.respond(w, r, notSent("Choose what happened."))
		return
	}
	command := proof.CommandReconcile
	if f.Get("stored") == "true" {
		command = proof.CommandReconcileStored
	}
	pc, ok := c.readPerson(w, r, proof.CommandSubject{Command: command, Run: run, Action: action, Content: content, Reason: strings.TrimSpace(f.Get("reason"))})
	if !ok {
		return
	}
	req := api.ReconcileRequest{CommandID: f.Get("command_id"), Run: run, Action: action, Content: content, By: strings.TrimSpace(f.Get("by")), Reason: pc.s.Reason, Proof: pc.proof}
	var rep api.Reply
	var err error
	if command == proof.CommandReconcileStored {
		rep, err = c.client.ReconcileStored(ctx, req)
	} else {
		rep, err = c.client.Reconcile(ctx, req)
	}
	if err == nil {
		c.log.Info("console: reconciled", "run", run, "action", action, "kind", f.Get("kind"), "signed", pc.proof != nil)
	}
	c.answerPerson(w, r, pc, rep, err, "Recorded as "+what+".", describeStatus(run, rep.Status), runLink(run))
}

// readOutput reads the tool's output from a form with the output fields
// (output-fields template), or says why it was not sent.
func (c *Console) readOutput(ctx context.Context, f url.Values) (json.RawMessage, string) {
	of := rawOutputForm("")
	if f.Get("out_mode") == "fields" {
		e, err := c.entry(ctx, events.AgentRef{Name: f.Get("agent"), Version: f.Get("version")})
		t, ok := e.Tool(f.Get("tool"))
		if err != nil || !ok || len(t.OutputSchema) == 0 {
			return nil, "The tool's output schema is not available now: reload the page."
		}
		of = formFromSchema(t.OutputSchema)
	}
	out, err := outputContent(of, f)
	if err != nil {
		return nil, "The tool's output: " + err.Error() + "." // shown after "Not sent."
	}
	return out, ""
}

// actResolve records the final truth of an open question: the tool's
// output (the effect happened) or a failure (it did not). The run does not
// change (weft.api.resolve).
func (c *Console) actResolve(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	run, action := f.Get("run"), f.Get("action")
	var content json.RawMessage
	var what string
	switch f.Get("kind") {
	case "output":
		out, problem := c.readOutput(ctx, f)
		if problem != "" {
			c.respond(w, r, notSent(problem))
			return
		}
		content, what = out, "it happened, with the tool's output"
	case "error":
		msg := strings.TrimSpace(f.Get("error"))
		if msg == "" {
			c.respond(w, r, notSent("Type what happened instead: why the effect did not happen."))
			return
		}
		content, _ = json.Marshal(map[string]string{"error": msg})
		what = "it did not happen"
	default:
		c.respond(w, r, notSent("Choose what finally happened."))
		return
	}
	pc, ok := c.readPerson(w, r, proof.CommandSubject{Command: proof.CommandResolve, Run: run, Action: action, Content: content, Reason: strings.TrimSpace(f.Get("reason"))})
	if !ok {
		return
	}
	rep, err := c.client.Resolve(ctx, api.ResolveRequest{CommandID: f.Get("command_id"), Run: run, Action: action, Content: content, By: strings.TrimSpace(f.Get("by")), Reason: pc.s.Reason, Proof: pc.proof})
	if err == nil {
		c.log.Info("console: resolved", "run", run, "action", action, "kind", f.Get("kind"), "signed", pc.proof != nil)
	}
	c.answerPerson(w, r, pc, rep, err, "Resolved: "+what+".", "Recorded in run "+run+"'s history; the run is unchanged.", runLink(run)+"#audit")
}

// actStart starts a run.
func (c *Console) actStart(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	agentName, input := strings.TrimSpace(f.Get("agent")), strings.TrimSpace(f.Get("input"))
	if agentName == "" || input == "" {
		c.respond(w, r, notSent("Name the agent and type the input."))
		return
	}
	// A form without a run id gets one here, so that a start whose
	// outcome is not known names the run to read, and the form, sent
	// again with it and its command id, starts that run at most once.
	run := strings.TrimSpace(f.Get("run"))
	if run == "" {
		run = newRunID()
	}
	rep, err := c.client.Start(ctx, api.StartRequest{CommandID: f.Get("command_id"), Run: run, Agent: agentName, Input: input})
	if err != nil {
		a := c.answerErr(r, err, run, "")
		if a.Unknown {
			a.Run = run
			a.again = &startForm{Agent: agentName, CommandID: f.Get("command_id"), Run: run, Input: input}
		}
		c.respond(w, r, a)
		return
	}
	// The start form starts the next run with a command id of its own.
	c.respond(w, r, answer{OK: true, Status: rep.Status, Link: runLink(rep.Run), Message: "Started run " + rep.Run + ".", NextCommandID: newCommandID()})
}

// actPause pauses a run, or resumes it when the form's decision is
// "resume" (docs/semantics.md §13).
func (c *Console) actPause(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	command := proof.CommandPause
	if r.PostForm.Get("decision") == "resume" {
		command = proof.CommandResume
	}
	c.actRun(w, r, command)
}

// actCancel cancels a run.
func (c *Console) actCancel(w http.ResponseWriter, r *http.Request) {
	if !c.form(w, r) {
		return
	}
	c.actRun(w, r, proof.CommandCancel)
}

// actRun sends a person's command on a whole run — cancel, pause or
// resume (proof.CommandCancel, …) — with its reason and who, from the
// form read (Console.form).
func (c *Console) actRun(w http.ResponseWriter, r *http.Request, command string) {
	ctx, cancel := c.actCtx(r)
	defer cancel()
	f := r.PostForm
	run := f.Get("run")
	pc, ok := c.readPerson(w, r, proof.CommandSubject{Command: command, Run: run, Reason: strings.TrimSpace(f.Get("reason"))})
	if !ok {
		return
	}
	// Cancel, pause and resume take the same request.
	req := api.CancelRequest{CommandID: f.Get("command_id"), Run: run, Reason: pc.s.Reason, By: strings.TrimSpace(f.Get("by")), Proof: pc.proof}
	var rep api.Reply
	var err error
	var done string
	switch command {
	case proof.CommandPause:
		rep, err = c.client.Pause(ctx, api.PauseRequest(req))
		done = "Paused."
	case proof.CommandResume:
		rep, err = c.client.Resume(ctx, api.ResumeRequest(req))
		done = "Resumed."
	default:
		rep, err = c.client.Cancel(ctx, req)
		done = "Cancelled."
	}
	c.answerPerson(w, r, pc, rep, err, done, describeStatus(run, rep.Status), "")
}
