package doccheck_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestTaskfile checks Taskfile.yml: every task has a
// desc; run, test, check and bench exist; test runs the module's tests
// and those of e2e/ui, the browser and terminal tests' module; check runs
// gofmt, vet, staticcheck and the race-enabled tests of both; build:release builds weft
// without symbols or DWARF and with trimmed paths (docs/benchmarks.md,
// "Binary sizes"); and the task tool and staticcheck
// are pinned in the developer tools' own module, devtools/go.mod, so that
// `go tool -modfile=devtools/go.mod task` needs no install, while the main
// go.mod names no tool (docs/adr/0012). The test task runs the suites with
// TMPDIR a fresh directory (internal/tmpcheck new, then make) and fails
// when they leave anything in it (tmpcheck check, its last command, and
// deferred too, so that the directory goes when a suite failed).
func TestTaskfile(t *testing.T) {
	b, err := os.ReadFile("../../../Taskfile.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tasks map[string]struct {
			Desc string            `yaml:"desc"`
			Cmds []cmd             `yaml:"cmds"`
			Env  map[string]string `yaml:"env"`
			Vars map[string]struct {
				Sh string `yaml:"sh"`
			} `yaml:"vars"`
		} `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("Taskfile.yml: %v", err)
	}
	for name, task := range tf.Tasks {
		if strings.TrimSpace(task.Desc) == "" {
			t.Errorf("task %s has no desc", name)
		}
	}
	for _, name := range []string{"run", "test", "check", "bench"} {
		if _, ok := tf.Tasks[name]; !ok {
			t.Errorf("no %s task", name)
		}
	}
	// The browser and terminal tests are a module of their own (e2e/ui,
	// docs/adr/0038): the root's go test ./... does not reach them, so
	// without their line in the test task CI would drop them silently.
	tt := tf.Tasks["test"]
	test := lines(tt.Cmds)
	for _, want := range []string{"go test -count=1 -parallel 4 -timeout 20m ./...", "cd e2e/ui && go test -count=1"} {
		if !strings.Contains(test, want) {
			t.Errorf("test task does not run %q:\n%s", want, test)
		}
	}
	// The leftover check: TMPDIR is a fresh directory, checked after the
	// suites (the last command) and on a failure (deferred).
	const leftovers = "TMPDIR= go run ./internal/tmpcheck check '{{.TESTTMP}}'"
	if tt.Env["TMPDIR"] != "{{.TESTTMP}}" || tt.Vars["TESTTMP"].Sh != "go run ./internal/tmpcheck new" {
		t.Errorf("test task does not run the suites with TMPDIR a fresh directory of tmpcheck new: env %v, vars %v", tt.Env, tt.Vars)
	}
	if n := len(tt.Cmds); n < 2 || tt.Cmds[0].Cmd != "TMPDIR= go run ./internal/tmpcheck make '{{.TESTTMP}}'" ||
		tt.Cmds[1].Defer != leftovers || tt.Cmds[n-1].Cmd != leftovers {
		t.Errorf("test task does not make its TMPDIR first, then defer %q and end with it:\n%s", leftovers, test)
	}
	check := lines(tf.Tasks["check"].Cmds)
	for _, want := range []string{"gofmt -l", "go vet ./...", "go tool -modfile=devtools/go.mod staticcheck ./...", "go test -race",
		"cd e2e/ui && go vet ./...", "cd e2e/ui && go tool -modfile=../../devtools/go.mod staticcheck ./...", "cd e2e/ui && go test -race"} {
		if !strings.Contains(check, want) {
			t.Errorf("check task does not run %q:\n%s", want, check)
		}
	}
	release := lines(tf.Tasks["build:release"].Cmds)
	for _, want := range []string{"go build -trimpath", `-ldflags="-s -w"`, "./cmd/weft"} {
		if !strings.Contains(release, want) {
			t.Errorf("build:release task does not run %q:\n%s", want, release)
		}
	}
	tools, err := os.ReadFile("../../../devtools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"github.com/go-task/task/v3/cmd/task", "honnef.co/go/tools/cmd/staticcheck"} {
		if !strings.Contains(string(tools), "\t"+tool+"\n") {
			t.Errorf("devtools/go.mod has no tool directive for %s", tool)
		}
	}
	mod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mod), "\ntool") {
		t.Error("go.mod has a tool directive: developer tools belong in devtools/go.mod")
	}
}

// cmd is a task's command: a line, or {defer: line}.
type cmd struct{ Cmd, Defer string }

func (c *cmd) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&c.Cmd)
	}
	var m struct {
		Defer string `yaml:"defer"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	c.Defer = m.Defer
	return nil
}

func lines(cmds []cmd) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(c.Cmd + c.Defer + "\n")
	}
	return b.String()
}
