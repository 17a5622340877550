// Command citations rewrites the citations of the module's Go, Markdown,
// script (*.txt) and JavaScript files: the design notes' section citations
// become docs/semantics.md, and tracker references become the file that
// holds the rule (rewrites.txt
// beside this file holds the rules written by hand). Run it from the
// module root, after a merge too:
//
//	go run ./internal/lint/doccheck/testdata/citations && gofmt -l . && go test ./internal/lint/doccheck -run Citation
//
// What it cannot rewrite, TestSemanticsCitationsExist names.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/weftrun/weft/internal/lint/doccheck"
)

func main() {
	rules, err := doccheck.ReadRewrites(filepath.Join("internal", "lint", "doccheck", "testdata", "citations", "rewrites.txt"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "citations:", err)
		os.Exit(1)
	}
	changed, err := doccheck.RewriteTree(".", rules)
	if err != nil {
		fmt.Fprintln(os.Stderr, "citations:", err)
		os.Exit(1)
	}
	for _, f := range changed {
		fmt.Println(f)
	}
}
