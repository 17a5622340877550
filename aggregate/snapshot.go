package aggregate

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weftrun/weft/events"
)

// SnapshotSchema is the version of State's JSON encoding. A snapshot of
// another version is refused; the runner then folds the history instead.
// Version 2 keeps the command proofs used (a snapshot of version 1 did
// not, so the runner folds such a run's history again); version 3 whether
// the last signed head is behind (HeadBehind).
const SnapshotSchema = 3

// snapshot is the JSON form of a State: every field, so that decoding a
// snapshot and folding the events after it equals folding the whole
// history.
type snapshot struct {
	Schema        int                `json:"schema"`
	Run           string             `json:"run"`
	Version       uint64             `json:"version"`
	Started       bool               `json:"started"`
	Start         events.RunStarted  `json:"start"`
	Incarnation   int                `json:"incarnation"`
	Runner        string             `json:"runner"`
	HandedOff     bool               `json:"handed_off,omitempty"`
	Uncalled      int64              `json:"uncalled,omitempty"`
	Turn          int64              `json:"turn"`
	ModelPending  bool               `json:"model_pending,omitempty"`
	ModelDue      *time.Time         `json:"model_due,omitempty"`
	RetryAt       *time.Time         `json:"retry_at,omitempty"`
	Failures      int                `json:"failures,omitempty"`
	Corrections   int                `json:"corrections,omitempty"`
	Tokens        int64              `json:"tokens"`
	Unreported    int                `json:"unreported,omitempty"`
	ChildTurns    int64              `json:"child_turns,omitempty"`
	Revision      int                `json:"revision,omitempty"`
	Actions       []Action           `json:"actions"`
	Batch         int64              `json:"batch,omitempty"`
	Transcript    []snapshotEntry    `json:"transcript"`
	Cancelling    bool               `json:"cancelling,omitempty"`
	Paused        bool               `json:"paused,omitempty"`
	Forked        *events.ForkedFrom `json:"forked,omitempty"`
	CommandProofs []UsedCommandProof `json:"command_proofs,omitempty"`
	Finished      bool               `json:"finished,omitempty"`
	Outcome       events.Outcome     `json:"outcome"`
	HeadBehind    bool               `json:"head_behind,omitempty"`
}

type snapshotEntry struct {
	Message *events.Message `json:"message,omitempty"`
	Batch   int64           `json:"batch,omitempty"`
}

// MarshalJSON encodes the whole State as a snapshot a runner may keep (for
// example in KV, with the head it was folded to) to avoid folding a long
// history from its first event: UnmarshalJSON and then Evolve with the
// events after Version.
func (s State) MarshalJSON() ([]byte, error) {
	snap := snapshot{
		Schema: SnapshotSchema, Run: s.run, Version: s.version, Started: s.started, Start: s.start,
		Incarnation: s.incarnation, Runner: s.runner, HandedOff: s.handedOff, Uncalled: s.uncalled,
		Turn: s.turn, ModelPending: s.modelPending, ModelDue: s.modelDue, RetryAt: s.retryAt,
		Failures: s.failures, Corrections: s.corrections, Tokens: s.tokens, Unreported: s.unreported,
		ChildTurns: s.childTurns, Revision: s.revision, Actions: s.actions, Batch: s.batch, Cancelling: s.cancelling,
		Paused: s.paused, Forked: s.forked, CommandProofs: s.commandProofs, Finished: s.finished, Outcome: s.outcome,
		HeadBehind: s.headBehind,
	}
	for _, e := range s.transcript {
		if e.batch != 0 {
			snap.Transcript = append(snap.Transcript, snapshotEntry{Batch: e.batch})
		} else {
			m := e.msg
			snap.Transcript = append(snap.Transcript, snapshotEntry{Message: &m})
		}
	}
	return json.Marshal(snap)
}

// UnmarshalJSON decodes a snapshot written by MarshalJSON.
func (s *State) UnmarshalJSON(b []byte) error {
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return fmt.Errorf("decode run snapshot: %w", err)
	}
	if snap.Schema != SnapshotSchema {
		return fmt.Errorf("decode run snapshot: schema %d, want %d", snap.Schema, SnapshotSchema)
	}
	*s = State{
		run: snap.Run, version: snap.Version, started: snap.Started, start: snap.Start,
		incarnation: snap.Incarnation, runner: snap.Runner, handedOff: snap.HandedOff, uncalled: snap.Uncalled,
		turn: snap.Turn, modelPending: snap.ModelPending, modelDue: snap.ModelDue, retryAt: snap.RetryAt,
		failures: snap.Failures, corrections: snap.Corrections, tokens: snap.Tokens, unreported: snap.Unreported,
		childTurns: snap.ChildTurns, revision: snap.Revision, actions: snap.Actions, batch: snap.Batch, cancelling: snap.Cancelling,
		paused: snap.Paused, forked: snap.Forked, commandProofs: snap.CommandProofs, finished: snap.Finished, outcome: snap.Outcome,
		headBehind: snap.HeadBehind,
	}
	if s.started {
		s.index = make(map[string]int, len(s.actions))
		for i, a := range s.actions {
			s.index[a.ID] = i
		}
	}
	for _, e := range snap.Transcript {
		if e.Message != nil {
			s.transcript = append(s.transcript, entry{msg: *e.Message})
		} else {
			s.transcript = append(s.transcript, entry{batch: e.Batch})
		}
	}
	return nil
}
