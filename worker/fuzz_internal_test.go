package worker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/internal/fuzzseed"
)

// FuzzTaskBody fuzzes the decoding of a tool task body taken from
// WEFT_TASKS (docs/protocol/41-tasks.md): decodeTask
// never panics, accepts only tasks naming their run and action (any other
// is terminated unrun), and what it accepts survives a round trip through
// its encoding unchanged.
func FuzzTaskBody(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		task, err := decodeTask(body)
		if err != nil {
			return
		}
		if task.Run == "" || task.Action == "" {
			t.Fatalf("accepted a task without run or action: %q", body)
		}
		b1, err := json.Marshal(task)
		if err != nil {
			t.Fatalf("accepted task %q does not encode: %v", body, err)
		}
		again, err := decodeTask(b1)
		if err != nil {
			t.Fatalf("re-encoded task %s refused: %v", b1, err)
		}
		b2, _ := json.Marshal(again)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("round trip changed the task:\n%s\n%s", b1, b2)
		}
	})
}

// TestTaskSeedsAreMeaningful: FuzzTaskBody's seeds named valid-* are accepted,
// every other seed refused.
func TestTaskSeedsAreMeaningful(t *testing.T) {
	t.Parallel()
	seeds, err := fuzzseed.Read(".", "FuzzTaskBody")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		if _, err := decodeTask([]byte(s.Values[0])); s.Valid() != (err == nil) {
			t.Errorf("%s: decodeTask: %v", s.Name, err)
		}
	}
}
