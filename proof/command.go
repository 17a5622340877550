package proof

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/weftrun/weft/events"
)

// The commands a CommandProof signs (events.CommandProof.Command): the
// person-made commands other than an answer, named as their endpoints.
const (
	// CommandReconcile is a reconciliation of a live run's action.
	CommandReconcile = "reconcile"
	// CommandReconcileStored is a reconciliation of a finished run's action.
	CommandReconcileStored = "reconcile_stored"
	// CommandResolve is the resolution of an open question.
	CommandResolve = "resolve"
	// CommandCancel is a run's cancellation.
	CommandCancel = "cancel"
	// CommandPause is a run's pause (docs/semantics.md §13).
	CommandPause = "pause"
	// CommandResume is a paused run's resume.
	CommandResume = "resume"
	// CommandVoid is a repair's void of the malformed message that
	// quarantines a run (`weft repair drop`; VoidSubject).
	CommandVoid = "void"
	// CommandRestart is a finished run's restart from one of its turns as
	// a new run (docs/semantics.md §14; RestartSubject).
	CommandRestart = "restart"
	// CommandHold is a legal hold placed on a run (HoldSubject).
	CommandHold = "hold"
	// CommandReleaseHold is the release of a run's legal hold
	// (ReleaseHoldSubject).
	CommandReleaseHold = "release_hold"
)

// RestartSubject is what a restart states (CommandRestart): the finished
// run parent restarted from its turn as the new run run, for reason. Its
// Run is the parent; its content is {"run":RUN,"turn":TURN}, so that a
// proof restarts one new run (a retry of that restart answers it) and is
// no proof of another; it has no action.
func RestartSubject(parent string, turn int64, run, reason string) CommandSubject {
	content, _ := json.Marshal(struct {
		Run  string `json:"run"`
		Turn int64  `json:"turn"`
	}{run, turn})
	return CommandSubject{Command: CommandRestart, Run: parent, Content: content, Reason: reason}
}

// HoldSubject is what a legal hold on run states (CommandHold): no action,
// no content, its reason.
func HoldSubject(run, reason string) CommandSubject {
	return CommandSubject{Command: CommandHold, Run: run, Reason: reason}
}

// ReleaseHoldSubject is what the release of run's legal hold hold (h1,
// h2, ...) states (CommandReleaseHold): the hold as its action, its
// reason. A signed release names its hold (the command API refuses one
// that does not), so that its proof releases that hold and no other.
func ReleaseHoldSubject(run, hold, reason string) CommandSubject {
	return CommandSubject{Command: CommandReleaseHold, Run: run, Action: hold, Reason: reason}
}

// VoidSubject is what a repair's void states (CommandVoid): on run, the
// message at stream sequence seq whose body has the SHA-256 sha256
// (lowercase hex), voided for reason. Its content is
// {"seq":SEQ,"sha256":"HASH"}; it has no action.
func VoidSubject(run string, seq uint64, sha256, reason string) CommandSubject {
	content, _ := json.Marshal(struct {
		Seq    uint64 `json:"seq"`
		SHA256 string `json:"sha256"`
	}{seq, sha256})
	return CommandSubject{Command: CommandVoid, Run: run, Content: content, Reason: reason}
}

// The reasons CheckCommand returns besides bad_signature, proof_expired,
// other_run and other_action.
const (
	// ReasonOtherCommand means the proof is for another command.
	ReasonOtherCommand = "other_command"
	// ReasonOtherContent means the proof is for other content.
	ReasonOtherContent = "other_content"
	// ReasonOtherReason means the proof states another reason.
	ReasonOtherReason = "other_reason"
)

// CommandSubject is what a person's command other than an answer does:
// Command (CommandReconcile, …) on Run, for Action (empty for a cancel),
// with Content (empty for a cancel) and Reason.
type CommandSubject struct {
	Command string
	Run     string
	Action  string
	Content json.RawMessage
	Reason  string
}

// contentHash is ArgumentsHash of content, empty for no content.
func contentHash(content json.RawMessage) (string, error) {
	if len(content) == 0 {
		return "", nil
	}
	return ArgumentsHash(content)
}

// NewCommand returns the unsigned command proof of s by key, expiring at
// expires (cut to whole seconds).
func NewCommand(s CommandSubject, key string, expires time.Time) (events.CommandProof, error) {
	h, err := contentHash(s.Content)
	if err != nil {
		return events.CommandProof{}, err
	}
	return events.CommandProof{Key: key, Command: s.Command, Run: s.Run, Action: s.Action, Content: h, Reason: s.Reason,
		Expires: expires.UTC().Truncate(time.Second)}, nil
}

// commandDomain separates command proofs' digests from approval proofs'.
const commandDomain = "weft command proof v1"

// CommandDigest returns the SHA-256 digest a command proof's signature
// covers: of the domain string "weft command proof v1" followed by, each
// as a 4-byte big-endian length and its bytes: the command, the run, the
// action, the content hash (lowercase hex, empty without content), the
// reason, the expiry (Unix seconds, decimal) and the key.
func CommandDigest(p events.CommandProof) [32]byte {
	return digest(commandDomain, p.Command, p.Run, p.Action, p.Content, p.Reason, strconv.FormatInt(p.Expires.Unix(), 10), p.Key)
}

// SignCommand signs p with sign (an nkeys.KeyPair's Sign for p.Key).
func SignCommand(p events.CommandProof, sign func([]byte) ([]byte, error)) (events.CommandProof, error) {
	sig, err := signDigest(CommandDigest(p), sign)
	p.Signature = sig
	return p, err
}

// VerifyCommand checks p's signature by p.Key (bad_signature).
func VerifyCommand(p events.CommandProof) error {
	return verifyDigest(p.Key, p.Signature, CommandDigest(p))
}

// CheckCommand checks p against s at now, in this order: each stated
// value against the subject's (other_command, other_run, other_action,
// other_content, other_reason), the signature (bad_signature) and the
// expiry (proof_expired). Whether the key is trusted is the caller's.
func CheckCommand(p events.CommandProof, s CommandSubject, now time.Time) error {
	if err := BindsCommand(p, s); err != nil {
		return err
	}
	if err := VerifyCommand(p); err != nil {
		return err
	}
	if !now.Before(p.Expires) {
		return refuse(ReasonProofExpired, "the proof expired at %s", p.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// BindsCommand checks that p states exactly s (CheckCommand's first step).
func BindsCommand(p events.CommandProof, s CommandSubject) error {
	switch {
	case p.Command != s.Command:
		return refuse(ReasonOtherCommand, "the proof is for the command %q, not %q", p.Command, s.Command)
	case p.Run != s.Run:
		return refuse(ReasonOtherRun, "the proof is for run %q, not %q", p.Run, s.Run)
	case p.Action != s.Action:
		return refuse(ReasonOtherAction, "the proof is for action %q, not %q", p.Action, s.Action)
	}
	h, err := contentHash(s.Content)
	if err != nil {
		return refuse(ReasonOtherContent, "the command's content is not JSON: %v", err)
	}
	if p.Content != h {
		return refuse(ReasonOtherContent, "the proof is for content with SHA-256 %s, the command's is %s", short(p.Content), short(h))
	}
	if p.Reason != s.Reason {
		return refuse(ReasonOtherReason, "the proof states the reason %q, the command %q", p.Reason, s.Reason)
	}
	return nil
}
