package tsdktest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestE2E_AGoAgentWhoseToolsTheTypeScriptWorkerServes is the end to end
// run of docs/typescript.md: a Go agent (Build, run by a real runner) whose
// tools are served by the TypeScript worker as a Node process completes a
// run; suspends for an approval that a Node service answers with a signed
// proof through the TypeScript client (sdk/typescript/test/support/approve.js),
// and runs the tool once after it; and a SIGKILL of the TypeScript worker
// mid-body leaves the documented outcome (docs/semantics.md §8): uncertain for
// a non-replayable tool, started again once for a replayable one.
func TestE2E_AGoAgentWhoseToolsTheTypeScriptWorkerServes(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	s := newSuite(t, TypeScriptWorker(t, "../.."), true, pub)

	t.Run("TestScenario1_ARunCompletes", func(t *testing.T) {
		p := s.spawn(t, 0, "1")
		input := `[{"tool":"echo","args":{"text":"a"}},{"tool":"replay","args":{"text":"b"}},{"tool":"settle","args":{"text":"c"}}]`
		s.startInput(t, "e2e-complete", input)
		st := s.waitFor(t, "e2e-complete", status("finished"))
		if st.Outcome != "completed" || string(st.Answer) != `"[{\"text\":\"a\"},{\"text\":\"b\"},{\"text\":\"c\"}]"` {
			t.Fatalf("outcome %s answer %s", st.Outcome, st.Answer)
		}
		if n := p.starts("e2e-complete"); n != 3 {
			t.Fatalf("%d bodies started, want 3", n)
		}
	})

	t.Run("TestScenario15_AnApprovalAnsweredFromTypeScriptWithASignedProof", func(t *testing.T) {
		p := s.spawn(t, 0, "1")
		s.start(t, "e2e-approve", "guarded", In{Text: "pay 10"})
		st := s.waitFor(t, "e2e-approve", status("suspended"))
		if a := st.Actions[0]; a.Tool != "guarded" || a.State != "awaiting_approval" {
			t.Fatalf("action %+v, want guarded awaiting its approval", a)
		}
		if n := p.starts("e2e-approve"); n != 0 {
			t.Fatalf("the body started %d times before the approval", n)
		}
		cmd := exec.Command(nodePath(t), filepath.Join(sdkDir(t), "test/support/approve.js"), s.srv.URL, "e2e-approve")
		cmd.Env = append(os.Environ(), "WEFT_APPROVER_SEED="+string(seed))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, testWriter{t}
		if err := cmd.Run(); err != nil {
			t.Fatalf("approve.js: %v (%s)", err, out.String())
		}
		st = s.waitFor(t, "e2e-approve", status("finished"))
		if st.Outcome != "completed" || string(st.Answer) != `"[{\"text\":\"pay 10\"}]"` {
			t.Fatalf("outcome %s answer %s", st.Outcome, st.Answer)
		}
		if n := p.starts("e2e-approve"); n != 1 {
			t.Fatalf("%d bodies started after the approval, want 1", n)
		}
	})

	t.Run("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBodyMakesANonReplayableActionUncertain", s.killed)
	t.Run("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBodyStartsAReplayableActionAgainOnce", s.killedReplay)
}

func nodePath(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on the PATH: %v", err)
	}
	return node
}

func sdkDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../sdk/typescript")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
