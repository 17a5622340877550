package chaos

import (
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/tools"
)

// envApprovalExpiry is the environment variable that gives a runner or
// worker part the agent's approval expiry (a time.Duration; unset: the
// agent's default, 7 days, which no run of the harness reaches).
const envApprovalExpiry = "WEFT_CHAOS_APPROVAL_EXPIRY"

// approvalExpiryOf is the approval expiry Config.ApprovalExpiry defaults
// to for seed: 2 s for odd seeds, so that approvals expire — half of them
// are answered only after it (answerDelay), some while their run's
// partition changes owner: the runs a recovery must answer after the
// expiry (docs/semantics.md §8, "A run can always be answered") — and none
// (negative) for even seeds, whose approvals never expire.
func approvalExpiryOf(seed uint64) time.Duration {
	if seed%2 == 1 {
		return 2 * time.Second
	}
	return -1
}

// answerDelay is how long the workload waits before it answers an
// approval request, from ch (the request's choice): up to 2 s, or, when
// approvals expire, for half of the requests half a second past the
// expiry (the answer is then approval_expired, or meets the expiry's
// takeover when the run's runner changed meanwhile).
func (w *workload) answerDelay(ch uint64) time.Duration {
	if e := w.h.cfg.ApprovalExpiry; e > 0 && ch>>24%2 == 0 {
		return e + 500*time.Millisecond
	}
	return time.Duration(ch>>8%2000) * time.Millisecond
}

// expiryEnv is the part environment that carries d (none for d <= 0).
func expiryEnv(d time.Duration) []string {
	if d <= 0 {
		return nil
	}
	return []string{envApprovalExpiry + "=" + d.String()}
}

// partAgentOptions are the agent options a part's environment sets: the
// approval expiry (envApprovalExpiry).
func partAgentOptions() []agent.Option {
	d, err := time.ParseDuration(os.Getenv(envApprovalExpiry))
	if err != nil || d <= 0 {
		return nil
	}
	return []agent.Option{agent.WithApprovalExpiry(tools.After(d))}
}

// leftToExpire reports whether a request the seed answers after its
// expiry (answerDelay) is left, in the quiet phase, for the runtime to
// expire: until strandedBound past its expiry, so that only the
// runners' timers move its run meanwhile, and a run whose expiry never
// fires is reported stranded (checkStranded) before the answer would
// decide the expiry itself.
func (w *workload) leftToExpire(ch uint64, expires time.Time) bool {
	e := w.h.cfg.ApprovalExpiry
	if e <= 0 || ch>>24%2 != 0 || expires.IsZero() || !w.inQuiet() {
		return false
	}
	return time.Now().Before(expires.Add(w.h.strandedBound() + strandedPoll))
}

// expiryProbes are the runs, when approvals expire, that the workload
// starts as the quiet phase begins and whose approval requests it never
// answers: two payments over the approval limit. Each run waits for a
// person, no runner holds it (evicted, docs/adr/0014), and only the
// durable timer of its request's expiry moves it on: a deployment whose
// runners consume no timer firing leaves it stranded (checkStranded).
func expiryProbes(cfg Config) []plan {
	if cfg.ApprovalExpiry <= 0 {
		return nil
	}
	var out []plan
	for i := range 2 {
		out = append(out, plan{id: fmt.Sprintf("s%d-expiry-%d", cfg.Seed, i+1), at: cfg.Duration, expire: true,
			script: script{Calls: []call{{Tool: toolPay, Args: args{MS: 10, Amount: approvalLimit + 1}}}}})
	}
	return out
}
