package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Describe returns one stable line for e: the event's name followed by its
// fields as key=value pairs in a fixed order. It is used for golden test
// output and the CLI timeline. Text is quoted; JSON is printed as stored.
// The format is stable: changing it changes every golden file.
func Describe(e Event) string {
	var b line
	b.s.WriteString(string(e.EventName()))
	switch e := e.(type) {
	case RunStarted:
		b.kv("agent", e.Agent.Name+"@"+e.Agent.Version)
		b.q("input", e.Input)
		b.opt("correlation", e.Correlation)
		b.kv("runner", e.Runner)
		if e.Typed {
			b.kv("typed", "true")
		}
		l := e.Limits
		b.kv("limits", fmt.Sprintf("turns=%d,concurrency=%d,tokens=%d,answer_attempts=%d,model_timeout=%s,retry_delay=%s,tool_timeout=%s,approval_expiry=%s,max_result_bytes=%d",
			l.MaxTurns, l.MaxConcurrency, l.TokenBudget, l.AnswerAttempts, ms(l.ModelTimeout), ms(l.ModelRetryDelay), ms(l.ToolTimeout), ms(l.ApprovalExpiry), l.MaxResultBytes))
		if p := e.Parent; p != nil {
			b.kv("parent", fmt.Sprintf("%s:%s,depth=%d,family_turns=%d,max_depth=%d", p.Run, p.Action, p.Depth, p.FamilyTurns, p.MaxDepth))
		}
	case ModelRequested:
		b.kv("turn", itoa(e.Turn))
		b.kv("why", e.Why)
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		b.t("deadline", e.Deadline)
	case ModelReplied:
		b.kv("turn", itoa(e.Turn))
		b.kv("kind", string(e.Kind))
		b.optq("text", e.Text)
		if len(e.Calls) > 0 {
			cs := make([]string, len(e.Calls))
			for i, c := range e.Calls {
				cs[i] = c.ID + ":" + c.Name + string(compact(c.Arguments))
			}
			b.kv("calls", "["+strings.Join(cs, " ")+"]")
		}
		if len(e.ProviderData) > 0 {
			b.kv("provider_data", strconv.Itoa(len(e.ProviderData))+"B")
		}
		b.optq("reason", e.Reason)
		b.kv("usage", usage(e.Usage))
	case ModelFailed:
		b.kv("turn", itoa(e.Turn))
		b.kv("kind", string(e.Kind))
		if e.Status != 0 {
			b.kv("status", strconv.Itoa(e.Status))
		}
		b.optq("message", e.Message)
		if e.RetryAfter != 0 {
			b.kv("retry_after", ms(e.RetryAfter))
		}
		b.t("retry_at", e.RetryAt)
	case AnswerRejected:
		b.kv("turn", itoa(e.Turn))
		b.q("reason", e.Reason)
	case CallValidated:
		b.kv("action", e.Action)
		b.kv("tool", e.Tool)
		b.kv("outcome", e.Outcome)
		b.optq("detail", e.Detail)
		b.json("normalized", e.Normalized)
		if e.Agent != nil {
			b.kv("agent", e.Agent.Name+"@"+e.Agent.Version)
		}
	case PolicyDecided:
		b.kv("action", e.Action)
		b.kv("context", e.Context)
		b.kv("decision", e.Decision)
		b.optq("reason", e.Reason)
		if e.Requirement != nil {
			b.kv("requirement", req(*e.Requirement))
		}
	case ApprovalRequested:
		b.kv("action", e.Action)
		b.kv("revision", strconv.Itoa(e.Revision))
		b.kv("requirement", req(e.Requirement))
		b.kv("why", e.Why)
		b.t("expires", e.Expires)
	case ApprovalAnswered:
		b.kv("action", e.Action)
		b.kv("revision", strconv.Itoa(e.Revision))
		b.kv("requirement", req(e.Requirement))
		b.kv("answer", e.Answer)
		b.optq("reason", e.Reason)
		b.opt("reviewer", e.Reviewer)
		b.opt("verifier", e.Verifier)
		b.identity(e.Identity)
		b.json("arguments", e.Arguments)
	case RequirementChanged:
		b.kv("action", e.Action)
		b.kv("revision", strconv.Itoa(e.Revision))
		b.kv("from", req(e.From))
		b.kv("to", req(e.To))
	case ActionQueued:
		b.kv("action", e.Action)
		b.kv("why", e.Why)
		b.kv("timeout", ms(e.Config.Timeout))
		b.kv("max_attempts", strconv.Itoa(e.Config.MaxAttempts))
		if e.Config.SettleWithin != 0 {
			b.kv("settle_within", ms(e.Config.SettleWithin))
		}
	case AttemptFenced:
		b.kv("action", e.Action)
		b.kv("tool", e.Tool)
		b.kv("attempt", strconv.Itoa(e.Attempt)+"/"+strconv.Itoa(e.MaxAttempts))
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		b.kv("timeout", ms(e.Timeout))
		if e.SettleWithin != 0 {
			b.kv("settle_within", ms(e.SettleWithin))
		}
		b.t("deadline", e.Deadline)
	case AttemptReported:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("outcome", e.Outcome)
		b.json("content", e.Content)
		b.optq("message", e.Message)
		b.optq("evidence", e.Evidence)
		if e.Bytes != 0 {
			b.kv("bytes", strconv.FormatInt(e.Bytes, 10))
		}
	case AttemptLost:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("cause", e.Cause)
		b.kv("next", e.Next)
		b.q("evidence", e.Evidence)
		b.t("settle_by", e.SettleBy)
	case AttemptClosed:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		b.kv("by", e.By)
		b.kv("why", e.Why)
		if e.Claimed {
			b.kv("claimed", "true")
		}
		if e.NotStarted != nil {
			b.kv("not_started_by", e.NotStarted.Worker)
			b.kv("not_started_why", e.NotStarted.Why)
		}
	case AttemptNotStarted:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		b.kv("worker", e.Worker)
		b.kv("why", e.Why)
		b.kv("by", e.By)
		if e.Ended {
			b.kv("ended", "true")
		}
	case ReportRefused:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("reason", e.Reason)
	case ActionUncertain:
		b.kv("action", e.Action)
		b.q("evidence", e.Evidence)
	case SettlementAccepted:
		b.kv("action", e.Action)
		b.kv("attempt", strconv.Itoa(e.Attempt))
		b.kv("outcome", e.Outcome)
		b.json("content", e.Content)
		b.optq("message", e.Message)
		b.optq("summary", e.Summary)
		if e.Late {
			b.kv("late", "true")
		}
	case SettlementRefused:
		b.kv("action", e.Action)
		b.kv("reason", e.Reason)
		b.optq("summary", e.Summary)
	case Reconciled:
		b.kv("action", e.Action)
		b.kv("kind", e.Kind)
		b.json("content", e.Content)
		b.opt("by", e.By)
		if e.Stored {
			b.kv("stored", "true")
		}
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case Resolved:
		b.kv("action", e.Action)
		b.kv("kind", e.Kind)
		b.json("content", e.Content)
		b.opt("by", e.By)
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case HeadSigned:
		b.kv("head", strconv.FormatUint(e.Version, 10)+":"+e.Hash)
		b.kv("key", e.Key)
		b.opt("signer", e.Signer)
	case ActionsNotStarted:
		b.kv("actions", "["+strings.Join(e.Actions, " ")+"]")
		b.kv("reason", e.Reason)
	case CancelRequested:
		b.opt("by", e.By)
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case RunPaused:
		b.opt("by", e.By)
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case RunResumed:
		b.opt("by", e.By)
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case RunForked:
		b.kv("from", e.From.Run)
		b.kv("version", strconv.FormatUint(e.From.Version, 10))
		b.kv("turn", itoa(e.From.Turn))
		b.kv("messages", strconv.Itoa(len(e.Transcript)))
		b.opt("by", e.By)
		b.optq("reason", e.Reason)
		b.identity(e.Identity)
	case RunHandedOff:
		b.kv("runner", e.Runner)
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		if e.Uncalled != 0 {
			b.kv("uncalled_turn", itoa(e.Uncalled))
		}
	case RunRecovered:
		b.kv("runner", e.Runner)
		b.kv("incarnation", strconv.Itoa(e.Incarnation))
		b.opt("previous", e.Previous)
		b.kv("cause", e.Cause)
	case RunFinished:
		b.kv("outcome", DescribeOutcome(e.Outcome))
	case ChildStarted:
		b.kv("action", e.Action)
		b.kv("child", e.Child)
		b.kv("agent", e.Agent.Name+"@"+e.Agent.Version)
		b.q("input", e.Input)
		b.kv("depth", strconv.Itoa(e.Depth))
		b.kv("family_turns", itoa(e.FamilyTurns))
		if e.MaxDepth != 0 {
			b.kv("max_depth", strconv.Itoa(e.MaxDepth))
		}
	case ChildSettled:
		b.kv("action", e.Action)
		b.kv("child", e.Child)
		b.kv("outcome", DescribeOutcome(e.Outcome))
		if e.Turns != 0 {
			b.kv("turns", itoa(e.Turns))
		}
		b.json("content", e.Content)
		if e.Bytes != 0 {
			b.kv("bytes", itoa(e.Bytes))
		}
		if e.Detached {
			b.kv("detached", "true")
		}
	}
	return b.s.String()
}

// DescribeOutcome returns a run outcome as one stable token, such as
// "completed" or "budget_exhausted(token_limit,limit=10,used=12)".
func DescribeOutcome(o Outcome) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if o.Reason != "" && o.Kind != OutcomeRefused && o.Kind != OutcomeAnswerInvalid {
		parts = append(parts, o.Reason)
	} else if o.Reason != "" {
		add("reason", strconv.Quote(o.Reason))
	}
	add("answer", string(compact(o.Answer)))
	if o.Raw != "" {
		add("raw", strconv.Quote(o.Raw))
	}
	if o.Partial != "" {
		add("partial", strconv.Quote(o.Partial))
	}
	if o.Limit != 0 {
		add("limit", itoa(o.Limit))
	}
	if o.Used != 0 {
		add("used", itoa(o.Used))
	}
	if o.Turn != 0 {
		add("turn", itoa(o.Turn))
	}
	add("action", o.Action)
	add("setting", o.Setting)
	if len(parts) == 0 {
		return o.Kind
	}
	return o.Kind + "(" + strings.Join(parts, ",") + ")"
}

type line struct{ s strings.Builder }

func (b *line) kv(k, v string) {
	b.s.WriteByte(' ')
	b.s.WriteString(k)
	b.s.WriteByte('=')
	b.s.WriteString(v)
}

func (b *line) opt(k, v string) {
	if v != "" {
		b.kv(k, v)
	}
}

func (b *line) q(k, v string) { b.kv(k, strconv.Quote(v)) }

func (b *line) optq(k, v string) {
	if v != "" {
		b.q(k, v)
	}
}

func (b *line) json(k string, v json.RawMessage) {
	if len(v) > 0 {
		b.kv(k, string(compact(v)))
	}
}

func (b *line) t(k string, v *time.Time) {
	if v != nil {
		b.kv(k, v.UTC().Format(time.RFC3339Nano))
	}
}

func compact(v json.RawMessage) []byte {
	if len(v) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return v
	}
	return buf.Bytes()
}

func ms(m Millis) string {
	if m == Infinite {
		return "infinity"
	}
	return strconv.FormatInt(int64(m), 10) + "ms"
}

func usage(u *Usage) string {
	if u == nil {
		return "unreported"
	}
	return strconv.FormatInt(u.InputTokens, 10) + "+" + strconv.FormatInt(u.OutputTokens, 10)
}

func req(r Requirement) string { return r.Name + "@v" + strconv.Itoa(r.Version) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// identity describes a person's command's Identity: "verified KEY" when
// the deployment vouches for it, nothing otherwise (an unverified name is
// the event's default).
func (b *line) identity(id Identity) {
	if id.Verified {
		b.kv("verified", id.Key)
	}
}
