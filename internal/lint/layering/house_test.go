package layering

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// productHelpers are the packages under internal/ that the product (every
// package of the module outside cmd/ and internal/) may import: production
// helpers. Everything else under internal/ is a harness (chaos, bench,
// bench/scale), the demo, a test kit or a lint test, for cmd/ and tests
// only (docs/architecture.md, "The house plan"). A new production helper
// is added here with what it is.
var productHelpers = map[string]string{
	"internal/backoff":      "the one retry delay",
	"internal/clock":        "the clock partition ownership reads",
	"internal/groupcommit":  "group commit: concurrent runs' writes as one atomic batch",
	"internal/inboxcheck":   "asks the server whether it refuses a connection's reply inbox",
	"internal/inflight":     "counts work in flight and tells when none is",
	"internal/lostconsumer": "stops a consume whose consumer the server lost",
	"internal/unanswered":   "tells a call the server did not answer",
}

// pkgImports is one package of the module and what its non-test files
// import, both as paths from the module root ("." for the root package);
// imports outside the module keep their full path. testOnly marks a
// package of test files only (e2e).
type pkgImports struct {
	path     string
	imports  []string
	testOnly bool
}

// under reports whether path is dir or a package below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// houseViolations lists the product packages of pkgs (and the production
// helpers) that import a harness, the demo, a test kit or a lint test.
func houseViolations(pkgs []pkgImports) []string {
	var out []string
	for _, p := range pkgs {
		if under(p.path, "cmd") || (under(p.path, "internal") && productHelpers[p.path] == "") {
			continue
		}
		for _, imp := range p.imports {
			if under(imp, "internal") && productHelpers[imp] == "" {
				out = append(out, p.path+" imports "+imp)
			}
		}
	}
	return out
}

// modulePackages lists every package of the module with its non-test
// imports (`go list`, from the module root).
func modulePackages(t *testing.T) []pkgImports {
	t.Helper()
	const module = "github.com/weftrun/weft"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .GoFiles}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	rel := func(p string) string {
		if p == module {
			return "."
		}
		if r, ok := strings.CutPrefix(p, module+"/"); ok {
			return r
		}
		return p
	}
	var pkgs []pkgImports
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := pkgImports{path: rel(f[0]), testOnly: f[1] == "0"}
		for _, imp := range f[2:] {
			p.imports = append(p.imports, rel(imp))
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestHarnessesOnlyInCmdAndTests keeps the house plan: no package of the
// product imports the chaos harness, the benchmarks, the demo, a test kit
// or a lint test in its non-test files; only cmd/ and tests do
// (docs/architecture.md, "The house plan").
func TestHarnessesOnlyInCmdAndTests(t *testing.T) {
	pkgs := modulePackages(t)
	var harnessUsers []string
	for _, p := range pkgs {
		if slices.Contains(p.imports, "internal/chaos") || slices.Contains(p.imports, "internal/bench") ||
			slices.Contains(p.imports, "internal/demo") {
			harnessUsers = append(harnessUsers, p.path)
		}
	}
	if !slices.Contains(harnessUsers, "cmd/weft") {
		t.Fatalf("cmd/weft imports no harness (importers: %v): go list's answer is not what this test reads", harnessUsers)
	}
	for _, v := range houseViolations(pkgs) {
		t.Errorf("%s: harnesses, the demo, test kits and lint tests are for cmd/ and tests", v)
	}
}

// TestHouseRuleFindsAHarnessInTheProduct runs the rule on a made-up
// module, so TestHarnessesOnlyInCmdAndTests cannot pass vacuously: a
// public package, a nested one, the root package and a production helper
// importing a harness, the demo or a test kit are found; cmd/, the
// harnesses among themselves and the production helpers are not.
func TestHouseRuleFindsAHarnessInTheProduct(t *testing.T) {
	got := houseViolations([]pkgImports{
		{path: "runner", imports: []string{"context", "internal/backoff", "internal/clock", "github.com/nats-io/nats.go"}},
		{path: "client", imports: []string{"internal/demo"}},
		{path: "model/openai", imports: []string{"internal/bench/scale"}},
		{path: ".", imports: []string{"internal/natstest"}},
		{path: "internal/backoff", imports: []string{"internal/chaos"}},
		{path: "cmd/weft", imports: []string{"internal/chaos", "internal/bench", "internal/demo"}},
		{path: "internal/bench/scale", imports: []string{"internal/bench"}},
		{path: "internal/busyrunner", imports: []string{"internal/natstest"}},
		{path: "model/anthropic", imports: []string{"model/internal/answer"}},
		{path: "internalx", imports: []string{"internalx/y"}},
	})
	want := []string{
		"client imports internal/demo",
		"model/openai imports internal/bench/scale",
		". imports internal/natstest",
		"internal/backoff imports internal/chaos",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// publicAPI are the packages of the product that no other package of the
// product imports, each with what an application (or a test of one) uses
// it for. Any other such package serves only cmd/ and tests: a harness,
// the demo or a test kit, whose place is under internal/.
var publicAPI = map[string]string{
	"host":                          "a whole node in one process",
	"console":                       "the operator console",
	"mcpserve":                      "the MCP server of an agent's tools",
	"mcpops":                        "the operator's view of Weft as MCP tools",
	"roles":                         "each role's NATS permissions and credentials",
	"natsnode":                      "the NATS connection, embedded or external",
	"model/provider":                "a model adapter opened from configuration",
	"telemetry/exporter":            "an OpenTelemetry exporter from the environment",
	"protocoltest":                  "the wire protocol tested from outside, with the nats CLI",
	"aggregate/aggregatetest":       "randomized runs through the aggregate, for tests of what folds its events",
	"projections/projtest":          "randomized run histories, for tests of projections",
	"model/anthropic/anthropictest": "a fake Anthropic server, for tests of an agent",
	"model/openai/openaitest":       "a fake OpenAI server, for tests of an agent",
}

// isProduct reports whether path is a package of the product: outside
// cmd/ and every internal/ directory.
func isProduct(path string) bool {
	return !under(path, "cmd") && !under(path, "internal") && !strings.Contains(path, "/internal/") &&
		!strings.HasSuffix(path, "/internal")
}

// unlistedLeaves lists the packages of the product in pkgs that no other
// package of the product imports and that api does not list, and the
// packages api lists that pkgs does not have.
func unlistedLeaves(pkgs []pkgImports, api map[string]string) []string {
	imported := map[string]bool{}
	have := map[string]bool{}
	for _, p := range pkgs {
		have[p.path] = true
		if !isProduct(p.path) {
			continue
		}
		for _, imp := range p.imports {
			imported[imp] = true
		}
	}
	var out []string
	for _, p := range pkgs {
		if isProduct(p.path) && !p.testOnly && !imported[p.path] && api[p.path] == "" {
			out = append(out, p.path+" is imported only by cmd/ and tests")
		}
	}
	var listed []string
	for p := range api {
		if !have[p] {
			listed = append(listed, p+" is listed but is no package")
		}
	}
	slices.Sort(listed)
	return append(out, listed...)
}

// TestEveryPublicLeafIsAPI keeps a harness, the demo or a test kit from
// reappearing beside the product: a package outside cmd/ and internal/
// that no other such package imports is one an application uses, listed
// in publicAPI with what for (docs/architecture.md, "The house plan").
func TestEveryPublicLeafIsAPI(t *testing.T) {
	for _, v := range unlistedLeaves(modulePackages(t), publicAPI) {
		t.Errorf("%s: move it under internal/, or list it in publicAPI with what an application uses it for", v)
	}
}

// TestLeafRuleFindsAHarnessBesideTheProduct runs the leaf rule on a
// made-up module, so TestEveryPublicLeafIsAPI cannot pass vacuously.
func TestLeafRuleFindsAHarnessBesideTheProduct(t *testing.T) {
	got := unlistedLeaves([]pkgImports{
		{path: ".", imports: nil},
		{path: "runner", imports: []string{"."}},
		{path: "host", imports: []string{"runner"}},
		{path: "chaos", imports: []string{"runner"}},
		{path: "cmd/weft", imports: []string{"chaos", "host"}},
		{path: "internal/bench", imports: []string{"runner"}},
		{path: "model/internal/fake", imports: []string{"."}},
		{path: "e2e", testOnly: true},
	}, map[string]string{"host": "a node", "gone": "a package that left"})
	want := []string{
		"chaos is imported only by cmd/ and tests",
		"gone is listed but is no package",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
