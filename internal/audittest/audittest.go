// Package audittest edits exported histories the way someone with write
// access to an export can: change an event, drop events, recompute the
// hash chain so that it holds again, and re-sign the chain heads with a
// key of their own. Tests use it to check that `weft audit verify` catches
// every such edit (docs/security.md, "Signed heads").
package audittest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// WaitEndHead waits until run's log ends with its signed end head (a
// head_signed right after run_finished) and returns the history and its
// head: the end head is appended after run_finished, so a wait for the
// run's status alone races it.
func WaitEndHead(t testing.TB, log *eventlog.Log, run string) ([]events.Envelope, eventlog.Head) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		envs, head, err := log.Load(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(envs); n >= 2 && envs[n-1].Type == events.NameHeadSigned && envs[n-2].Type == events.NameRunFinished {
			return envs, head
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: its log never ended with run_finished and its signed head (%d events)", run, len(envs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Replace returns a copy of envs in which old is replaced by new in the
// payloads of the events of type typ, with the hash chain recomputed
// (Rechain), and how many events it changed.
func Replace(envs []events.Envelope, typ events.Name, old, new string) ([]events.Envelope, int) {
	out := clone(envs)
	n := 0
	for i := range out {
		if out[i].Type == typ && bytes.Contains(out[i].Payload, []byte(old)) {
			out[i].Payload = json.RawMessage(bytes.ReplaceAll(out[i].Payload, []byte(old), []byte(new)))
			n++
		}
	}
	return Rechain(out), n
}

// ReadExport reads the exported history at path (audit.ReadExport).
func ReadExport(t testing.TB, path string) []events.Envelope {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	envs, err := audit.ReadExport(f)
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// Rechain returns a copy of envs whose every Prev is the hash of the event
// before it again: the chain holds whatever was edited. Signed heads are
// left as they are.
func Rechain(envs []events.Envelope) []events.Envelope {
	out := clone(envs)
	for i := 1; i < len(out); i++ {
		out[i].Prev = out[i-1].Hash()
	}
	return out
}

// Resign returns a copy of envs rechained, with every signed head
// (events.HeadSigned) made over the head before it again and signed by kp
// under the name signer: a rewrite re-signed by a stranger.
func Resign(envs []events.Envelope, kp nkeys.KeyPair, signer string) []events.Envelope {
	out := clone(envs)
	key, _ := kp.PublicKey()
	for i := range out {
		if i > 0 {
			out[i].Prev = out[i-1].Hash()
		}
		if out[i].Type != events.NameHeadSigned || i == 0 {
			continue
		}
		prev := out[i-1]
		d := events.HeadDigest(prev.Run, prev.Version, prev.Hash(), key)
		sig, _ := kp.Sign(d[:])
		hs := events.HeadSigned{Version: prev.Version, Hash: prev.Hash(), Key: key, Signer: signer, Signature: base64.RawURLEncoding.EncodeToString(sig)}
		out[i].Payload, _ = json.Marshal(hs)
	}
	return out
}

// Chain returns evs as the envelopes of run, versions 1, 2, 3, … recorded
// a second apart from start, each linked to the one before it: a history
// as the log would hold it, to export and edit.
func Chain(run string, start time.Time, evs []events.Event) ([]events.Envelope, error) {
	var out []events.Envelope
	prev := ""
	for i, e := range evs {
		env, err := events.Encode(e)
		if err != nil {
			return nil, err
		}
		env.ID = fmt.Sprintf("%s-%d", run, i+1)
		env.Run, env.Version, env.Recorded, env.Prev = run, uint64(i+1), start.Add(time.Duration(i)*time.Second), prev
		prev = env.Hash()
		out = append(out, env)
	}
	return out, nil
}

func clone(envs []events.Envelope) []events.Envelope {
	out := make([]events.Envelope, len(envs))
	copy(out, envs)
	return out
}
