// Package projtest generates randomized run histories for the tests of the
// projections and the projector: many runs whose events interleave in log
// order, covering every event of the catalogue (approvals answered, rejected
// and expired, requirement changes, replays, lost attempts, uncertain effects
// and reconciliations, settlements, hand-offs, cancellations, every outcome).
//
// The histories are plausible, not exact: they exercise the folds, they are
// not a model of the decision core. The same seed gives the same history.
package projtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/weftrun/weft/events"
)

// Base returns the recorded time of the first generated event.
func Base() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) }

// Histories returns the histories of runs runs generated from seed, each
// oldest first, and the same events interleaved in one log order (the order
// in which a projector would see them). Recorded times increase along the log
// order.
func Histories(seed uint64, runs int) (perRun [][]events.Recorded, log []events.Recorded) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	perRun = make([][]events.Recorded, runs)
	for i := range perRun {
		perRun[i] = runHistory(rng, fmt.Sprintf("run-%04d", i))
	}
	// Interleave: repeatedly take the next event of a random run that has
	// events left.
	next := make([]int, runs)
	live := make([]int, runs)
	for i := range live {
		live[i] = i
	}
	at := Base()
	for len(live) > 0 {
		k := rng.IntN(len(live))
		r := live[k]
		at = at.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
		perRun[r][next[r]].At = at
		log = append(log, perRun[r][next[r]])
		next[r]++
		if next[r] == len(perRun[r]) {
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	return perRun, log
}

var agents = []string{"payment-desk", "triage", "refunds"}
var toolNames = []string{"lookup_invoice", "pay_invoice", "notify", "refund"}

type gen struct {
	rng  *rand.Rand
	run  string
	evs  []events.Recorded
	rev  int
	inc  int
	done bool
	// resolve lists the open questions resolved at the end of the history.
	resolve []string
}

func (g *gen) add(e events.Event) {
	g.evs = append(g.evs, events.Recorded{Run: g.run, Version: uint64(len(g.evs) + 1), Event: e})
}

func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

func runHistory(rng *rand.Rand, run string) []events.Recorded {
	g := &gen{rng: rng, run: run, inc: 1}
	g.add(events.RunStarted{
		Agent:  events.AgentRef{Name: agents[rng.IntN(len(agents))], Version: "1"},
		Input:  fmt.Sprintf("pay invoice %d", rng.IntN(1000)),
		Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4, ApprovalExpiry: 60000},
		Runner: "runner-1",
	})
	turns := 1 + rng.IntN(3)
	var uncertain []string
	for turn := int64(1); turn <= int64(turns) && !g.done; turn++ {
		g.add(events.ModelRequested{Turn: turn, Incarnation: 1})
		if g.chance(0.1) {
			retry := Base()
			g.add(events.ModelFailed{Turn: turn, Kind: events.FailureRateLimited, RetryAt: &retry})
			if g.chance(0.3) {
				g.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonModelFailed})
				break
			}
			turn++
			g.add(events.ModelRequested{Turn: turn, Incarnation: 1})
		}
		if g.chance(0.1) {
			g.add(events.RunHandedOff{Runner: "runner-1", Incarnation: g.inc})
			if g.chance(0.2) {
				break // left unattended
			}
			g.inc++
			g.add(events.RunRecovered{Runner: "runner-2", Incarnation: g.inc, Previous: "runner-1", Cause: "handed_off"})
		}
		if turn == int64(turns) || g.chance(0.1) {
			var usage *events.Usage
			if g.chance(0.8) {
				usage = &events.Usage{InputTokens: int64(rng.IntN(500)), OutputTokens: int64(rng.IntN(200))}
			}
			g.add(events.ModelReplied{Turn: turn, Kind: events.ReplyFinalAnswer, Text: "done", Usage: usage})
			if len(uncertain) > 0 && g.chance(0.5) {
				// Leave the run suspended on its uncertain actions.
				return g.evs
			}
			g.finish(events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`{"paid": true}`)})
			break
		}
		calls := 1 + rng.IntN(3)
		var cs []events.ToolCall
		for c := range calls {
			cs = append(cs, events.ToolCall{
				ID:        fmt.Sprintf("call_%d", c),
				Name:      toolNames[rng.IntN(len(toolNames))],
				Arguments: json.RawMessage(fmt.Sprintf(`{ "invoice": %d, "note": "n\u00e9 %d" }`, rng.IntN(100), c)),
			})
		}
		g.add(events.ModelReplied{Turn: turn, Kind: events.ReplyToolRequest, Calls: cs,
			Usage: &events.Usage{InputTokens: int64(rng.IntN(500)), OutputTokens: int64(rng.IntN(200))}})
		stop := false
		for _, c := range cs {
			id := fmt.Sprintf("%d/%s", turn, c.ID)
			if g.action(id, c.Name) {
				uncertain = append(uncertain, id)
			}
			if g.chance(0.05) {
				stop = true
				break
			}
		}
		if stop {
			// Stop mid-batch: the run stays working or suspended, or
			// paused (docs/semantics.md §13).
			if g.chance(0.3) {
				g.add(events.RunPaused{By: "carol", Reason: "checking the vendor"})
			}
			return g.evs
		}
		if g.chance(0.05) {
			g.add(events.RunPaused{By: "carol"})
			g.add(events.RunResumed{By: "carol", Reason: "vendor confirmed"})
		}
		if g.chance(0.08) {
			g.add(events.CancelRequested{By: "alice", Reason: "changed my mind"})
			g.finish(events.Outcome{Kind: events.OutcomeCancelled})
			break
		}
		for _, u := range uncertain {
			switch {
			case g.chance(0.4):
				g.add(events.Reconciled{Action: u, Kind: "output", Content: json.RawMessage(`{"ok":true}`), By: "bob"})
			case g.chance(0.5):
				// An open question, resolved later (or never).
				g.add(events.Reconciled{Action: u, Kind: "unconfirmed", Content: json.RawMessage(`{"unconfirmed":"checking"}`), By: "bob"})
				if g.chance(0.5) {
					g.resolve = append(g.resolve, u)
				}
			}
		}
		uncertain = nil
	}
	if !g.done && g.chance(0.5) {
		g.finish(events.Outcome{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonTurnLimit, Limit: 8})
	}
	for _, u := range uncertain {
		if g.done && g.chance(0.5) {
			g.add(events.Reconciled{Action: u, Kind: "unconfirmed", Content: json.RawMessage(`{"unconfirmed":"asked the bank"}`), Stored: true})
			if g.chance(0.5) {
				g.resolve = append(g.resolve, u)
			}
		}
	}
	for _, u := range g.resolve {
		g.add(events.Resolved{Action: u, Kind: "error", Content: json.RawMessage(`{"error":"it never went out"}`), By: "erin"})
	}
	return g.evs
}

func (g *gen) finish(o events.Outcome) {
	g.add(events.RunFinished{Outcome: o})
	g.done = true
}

// action adds the events of one action's path and reports whether it ended
// uncertain.
func (g *gen) action(id, tool string) bool {
	switch g.rng.IntN(10) {
	case 0:
		g.add(events.CallValidated{Action: id, Tool: tool, Outcome: events.CallUnknownTool})
		return false
	case 1:
		g.add(events.CallValidated{Action: id, Tool: tool, Outcome: events.CallInvalidArguments, Detail: "/invoice: must be integer"})
		return false
	}
	g.add(events.CallValidated{Action: id, Tool: tool, Outcome: events.CallValid})
	switch g.rng.IntN(4) {
	case 0:
		g.add(events.PolicyDecided{Action: id, Context: "model", Decision: events.PolicyDeny, Reason: "over limit"})
		return false
	case 1:
		req := events.Requirement{Name: "finance", Version: 1}
		g.add(events.PolicyDecided{Action: id, Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req})
		g.rev++
		exp := Base().Add(time.Hour)
		g.add(events.ApprovalRequested{Action: id, Revision: g.rev, Requirement: req, Expires: &exp, Why: "policy"})
		switch g.rng.IntN(5) {
		case 0:
			return false // left pending
		case 1:
			g.add(events.ApprovalAnswered{Action: id, Revision: g.rev, Requirement: req, Answer: events.AnswerReject, Reason: "no"})
			return false
		case 2:
			g.add(events.ApprovalAnswered{Action: id, Revision: g.rev, Requirement: req, Answer: events.AnswerExpired})
			return false
		case 3:
			g.add(events.ApprovalAnswered{Action: id, Revision: g.rev, Requirement: req, Answer: events.AnswerApprove, Reviewer: "alice", Verifier: "sso"})
			to := events.Requirement{Name: "finance", Version: 2}
			g.add(events.PolicyDecided{Action: id, Context: "approval", Decision: events.PolicyRequireApproval, Requirement: &to})
			g.add(events.RequirementChanged{Action: id, Revision: g.rev, From: req, To: to})
			g.rev++
			g.add(events.ApprovalRequested{Action: id, Revision: g.rev, Requirement: to, Why: "requirement_changed"})
			if g.chance(0.5) {
				return false
			}
			g.add(events.ApprovalAnswered{Action: id, Revision: g.rev, Requirement: to, Answer: events.AnswerApprove, Reviewer: "carol", Verifier: "sso"})
		default:
			g.add(events.ApprovalAnswered{Action: id, Revision: g.rev, Requirement: req, Answer: events.AnswerApprove, Reviewer: "alice", Verifier: "sso"})
		}
		g.add(events.PolicyDecided{Action: id, Context: "approval", Decision: events.PolicyAllow})
	default:
		g.add(events.PolicyDecided{Action: id, Context: "model", Decision: events.PolicyAllow})
	}
	g.add(events.ActionQueued{Action: id, Why: "allowed"})
	for attempt := 1; ; attempt++ {
		g.add(events.AttemptFenced{Action: id, Tool: tool, Attempt: attempt, Incarnation: 1, Timeout: 60000, MaxAttempts: 3})
		switch g.rng.IntN(8) {
		case 0:
			if attempt < 3 {
				g.add(events.AttemptLost{Action: id, Attempt: attempt, Cause: events.CauseCrashed, Evidence: "worker crashed", Next: events.NextReplay})
				continue
			}
			g.add(events.AttemptLost{Action: id, Attempt: attempt, Cause: events.CauseCrashed, Evidence: "worker crashed, attempts exhausted", Next: events.NextUncertain})
			return true
		case 1:
			g.add(events.AttemptReported{Action: id, Attempt: attempt, Outcome: events.OutcomeUncertain, Evidence: "bank timed out after the request was sent"})
			return true
		case 2:
			by := Base().Add(time.Minute)
			g.add(events.AttemptLost{Action: id, Attempt: attempt, Cause: events.CauseTimedOut, Evidence: "timed out", Next: events.NextSettle, SettleBy: &by})
			if g.chance(0.5) {
				g.add(events.SettlementAccepted{Action: id, Attempt: attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"settled":1}`), Summary: "paid"})
				return false
			}
			g.add(events.ActionUncertain{Action: id, Evidence: "no settlement within 60000 ms"})
			if g.chance(0.3) {
				g.add(events.SettlementRefused{Action: id, Reason: "not_awaited", Summary: "late"})
				g.add(events.SettlementAccepted{Action: id, Attempt: attempt, Outcome: events.OutcomeExplain, Message: "card declined", Late: true})
				return false
			}
			return true
		case 3:
			g.add(events.AttemptReported{Action: id, Attempt: attempt, Outcome: events.OutcomeExplain, Message: "invoice not found"})
			return false
		case 4:
			g.add(events.ReportRefused{Action: id, Attempt: attempt + 1, Reason: "premature"})
		}
		big := make([]byte, 300)
		for i := range big {
			big[i] = 'a' + byte(g.rng.IntN(26))
		}
		g.add(events.AttemptReported{Action: id, Attempt: attempt, Outcome: events.OutcomeOutput,
			Content: json.RawMessage(fmt.Sprintf(`{"receipt": "%s"}`, big[:10+g.rng.IntN(290)]))})
		return false
	}
}
