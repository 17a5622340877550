package ownership

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestBoundary holds the boundary between the command loop and ownership
// to the lists of doc.go ("The boundary"): the Coordinator's exported
// methods, those of CommandLoop, and the names of this package the
// runner's own (non-test) files use — the Coordinator and what goes
// through it, never the Table or the Peers directly. A method added on
// either side, or a runner file that reaches past the Coordinator, fails
// here until doc.go (and docs/architecture.md) say so.
func TestBoundary(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	begin := strings.Index(text, "# The boundary")
	split := strings.Index(text, "The Coordinator asks the command loop")
	end := strings.Index(text, "docs/architecture.md, \"The runner")
	if begin < 0 || split < begin || end < split {
		t.Fatal("doc.go: the boundary section is missing or out of order")
	}
	listed := func(section string) []string {
		// An item begins with "//   - " and may go on over the lines
		// indented under it.
		var items []string
		for _, line := range strings.Split(section, "\n") {
			if item, ok := strings.CutPrefix(line, "//   - "); ok {
				items = append(items, item)
			} else if more, ok := strings.CutPrefix(line, "//     "); ok && len(items) > 0 {
				items[len(items)-1] += " " + more
			}
		}
		var names []string
		for _, item := range items {
			item, _, _ = strings.Cut(item, ":")
			item = strings.TrimSuffix(strings.TrimSpace(item), ".")
			for _, n := range strings.Split(item, ",") {
				names = append(names, strings.TrimSpace(n))
			}
		}
		slices.Sort(names)
		return names
	}
	methods := func(typ reflect.Type) []string {
		var names []string
		for i := range typ.NumMethod() {
			names = append(names, typ.Method(i).Name)
		}
		slices.Sort(names)
		return names
	}
	if got, want := methods(reflect.TypeFor[*Coordinator]()), listed(text[begin:split]); !slices.Equal(got, want) {
		t.Errorf("Coordinator's exported methods are %v; doc.go lists %v", got, want)
	}
	if got, want := methods(reflect.TypeFor[CommandLoop]()), listed(text[split:end]); !slices.Equal(got, want) {
		t.Errorf("CommandLoop's methods are %v; doc.go lists %v", got, want)
	}

	// What the runner names of this package: the Coordinator, its
	// config and the loop's interface, a hand-off's outcomes, and two
	// helpers of the buckets' layout.
	allowed := []string{"Coordinator", "CoordinatorConfig", "NewCoordinator", "CommandLoop",
		"HandOff", "HandedOff", "Postponed", "Stopped", "Key", "MarkerTTL"}
	files, err := filepath.Glob(filepath.Join("..", "..", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the runner's files: %v %v", files, err)
	}
	use := regexp.MustCompile(`\bownership\.([A-Za-z_]+)`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue // a comment may name what it explains
			}
			for _, m := range use.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(allowed, m[1]) {
					t.Errorf("%s uses ownership.%s: the runner goes through the Coordinator (doc.go, \"The boundary\")", filepath.Base(f), m[1])
				}
			}
		}
	}
}
