package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// Exported is one run of an export file: its events, in version order,
// and the void records of its repairs (eventlog.VoidRecord: `weft repair
// drop`), which are not events and change no hash chain.
type Exported struct {
	Run    string
	Events []events.Envelope
	Voids  []eventlog.VoidRecord
}

// voidLine is the line of an export that carries a void record: {"run":
// RUN, "void": {...}}. It follows its run's events.
type voidLine struct {
	Run  string              `json:"run"`
	Void eventlog.VoidRecord `json:"void"`
}

// ExportRun writes one run of an export: its events as JSON lines (as
// Export), then a line per void record. An export of several runs writes
// them one after another; ReadRuns splits them again.
func ExportRun(w io.Writer, envs []events.Envelope, voids []eventlog.VoidRecord) error {
	if err := Export(w, envs); err != nil {
		return err
	}
	if len(voids) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	for _, v := range voids {
		b, err := json.Marshal(voidLine{Run: envs[0].Run, Void: v})
		if err != nil {
			return fmt.Errorf("audit: export void of %s at %d: %w", envs[0].Run, v.At, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// ReadRuns reads an export of one or more runs: each run's lines are
// consecutive (its events, then its void records). A line that is
// neither an envelope nor a void record is a *Problem of kind "parse";
// a run whose lines are split by another run's, or a void record of a
// run whose events are not just before it, is a *Problem of kind
// "sequence" naming the line.
func ReadRuns(r io.Reader) ([]Exported, error) {
	var out []Exported
	seen := map[string]bool{}
	err := eachLine(r, func(line int, b []byte) error {
		if bytes.HasPrefix(b, []byte(`{"run":`)) && bytes.Contains(b, []byte(`"void":`)) {
			var v voidLine
			if decodeStrict(b, &v) == nil {
				if len(out) == 0 || out[len(out)-1].Run != v.Run {
					return &Problem{Kind: KindSequence, Line: line, Message: fmt.Sprintf("line %d is a void record of run %q, which is not the run of the events just before it", line, v.Run)}
				}
				out[len(out)-1].Voids = append(out[len(out)-1].Voids, v.Void)
				return nil
			}
		}
		var env events.Envelope
		if err := decodeStrict(b, &env); err != nil {
			return &Problem{Kind: KindParse, Line: line, Message: fmt.Sprintf("line %d is not an event envelope or a void record: %v", line, err)}
		}
		if n := len(out); n > 0 && out[n-1].Run == env.Run && len(out[n-1].Voids) == 0 {
			out[n-1].Events = append(out[n-1].Events, env)
			return nil
		}
		if seen[env.Run] {
			return &Problem{Kind: KindSequence, Line: line, Message: fmt.Sprintf("line %d is an event of run %q, whose lines came before another run's: a run's lines are consecutive", line, env.Run)}
		}
		seen[env.Run] = true
		out = append(out, Exported{Run: env.Run, Events: []events.Envelope{env}})
		return nil
	})
	return out, err
}
