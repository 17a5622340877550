package doccheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SemanticsDoc is the path, from the module root, of the project's
// statement of its rules, which code and docs cite by section
// ("docs/semantics.md §8").
const SemanticsDoc = "docs/semantics.md"

// gap matches the space between two words of a citation, which may break
// across the lines of a comment ("docs/semantics.md\n\t// §8"; "#" in a
// script, " * " in a JavaScript block comment).
const gap = `(?:[ \t]*\n[ \t]*(?:(?://|#|\*)[ \t]?)?[ \t]*|[ \t]+)`

var (
	// semanticsCite is one citation of the semantics: the path, then a
	// section and the sections listed after it ("§9, §10", "§7 and §8"),
	// then an optional quoted text the cited section must hold.
	semanticsCite = regexp.MustCompile(`docs/semantics\.md` + gap + `§(\d+)((?:(?:,|` + gap + `and|` + gap + `with|` + gap + `/)` + gap + `§\d+)*)(?:,?` + gap + `"([^"]+)")?`)
	// scenarioCite is a citation of a numbered scenario of §12.
	scenarioCite = regexp.MustCompile(`docs/semantics\.md` + gap + `§12,?` + gap + `scenarios?` + gap + `(\d+)`)
	// scenarioItem is a numbered scenario in §12: "31. Approval pending, …".
	scenarioItem = regexp.MustCompile(`(?m)^(\d+)\. `)
	// namedTest is a test named after a section or a scenario
	// ("TestSemantics8_…", "TestScenario31_…"), or a script of the
	// aggregate's named so ("rule08_….txt", "scenario31_….txt").
	namedTest = regexp.MustCompile(`\bTest(Semantics|Scenario)0*(\d+)_|(?:^|/)(rule|scenario)0*(\d+)_[^/]*\.txt$`)
	// sectionNumber is one section number of a citation's list.
	sectionNumber = regexp.MustCompile(`§(\d+)`)
	// designDoc is a citation of the design notes the semantics came from,
	// a file outside the repository.
	designDoc = regexp.MustCompile(`\bSEMANTICS\b`)
	// trackerRef is a citation of a tracker entry (an issue or a review
	// finding), which a reader of the repository cannot open.
	trackerRef = regexp.MustCompile(trackerRefWords)
	// heading is a Markdown heading of docs/semantics.md: "## 8. Recovery"
	// opens section 8, "### Closing an attempt" a titled rule inside it.
	heading = regexp.MustCompile(`^(#{2,3})\s+(?:(\d+)\.\s+)?(.+)$`)
)

// CitationProblem is one citation that points nowhere: the file (from the
// module root), its line and what is wrong.
type CitationProblem struct {
	File   string
	Line   int
	Reason string
}

// String renders the problem as "file:line: reason".
func (p CitationProblem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Reason) }

// section is one numbered section of docs/semantics.md: its heading and
// its text, whitespace collapsed and lower-cased, to find quoted rules in.
type section struct {
	title string
	text  string
	raw   string
}

// readSections reads the numbered sections of the semantics document.
func readSections(path string) (map[int]section, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int]section{}
	cur := 0
	var b strings.Builder
	flush := func() {
		if cur != 0 {
			s := out[cur]
			s.text = normalize(b.String())
			s.raw = b.String()
			out[cur] = s
		}
		b.Reset()
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := heading.FindStringSubmatch(line); m != nil && m[1] == "##" {
			flush()
			cur = 0
			if m[2] != "" {
				n, _ := strconv.Atoi(m[2])
				cur = n
				out[n] = section{title: m[3]}
			}
			continue
		}
		b.WriteString(strings.TrimLeft(line, "#"))
		b.WriteByte('\n')
	}
	flush()
	return out, sc.Err()
}

// normalize lower-cases s and keeps only its letters and digits, one
// space between words, so that a quote broken across comment lines, or
// quoting a table row or a parenthesis, still matches.
func normalize(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return ' '
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// citedFiles lists the files under root that citations are checked in
// (Go, Markdown, the datadriven scripts' *.txt and JavaScript or
// TypeScript), relative to root, in order; node_modules, .git and this
// checker's own files are left out.
func citedFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || n == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".txt", ".js", ".mjs", ".ts":
		default:
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); !ownFile(rel) {
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// Citations checks every Go, Markdown, script (*.txt) and JavaScript or
// TypeScript file under root (this checker's own files left out): tests
// named after a section or a scenario (TestSemantics8_…, TestScenario31_…,
// rule08_*.txt, scenario31_*.txt) name one that exists; each
// "docs/semantics.md §N" names a section docs/semantics.md has, and a text
// quoted right after the section is in that section; no file cites the
// design notes ("SEMANTICS.md", "SEMANTICS §N") or a tracker entry ("issue
// 17", "reviewer F4", "review r3"), except a line of allowed, the files
// and phrases whose "issue" means something else. Problems come in file
// order, then by kind and line.
func Citations(root string, allowed map[string][]string) ([]CitationProblem, error) {
	secs, err := readSections(filepath.Join(root, filepath.FromSlash(SemanticsDoc)))
	if err != nil {
		return nil, err
	}
	files, err := citedFiles(root)
	if err != nil {
		return nil, err
	}
	var out []CitationProblem
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		src := string(b)
		line := func(off int) int { return strings.Count(src[:off], "\n") + 1 }
		for _, m := range semanticsCite.FindAllStringSubmatchIndex(src, -1) {
			list := src[m[2]:m[3]]
			if m[4] >= 0 {
				list += src[m[4]:m[5]]
			}
			var nums []int
			for _, n := range sectionNumber.FindAllStringSubmatch("§"+list, -1) {
				v, _ := strconv.Atoi(n[1])
				nums = append(nums, v)
			}
			for _, n := range nums {
				if _, ok := secs[n]; !ok {
					out = append(out, CitationProblem{rel, line(m[0]), fmt.Sprintf("cites %s §%d, which has no such section", SemanticsDoc, n)})
				}
			}
			if m[6] >= 0 {
				q := src[m[6]:m[7]]
				if s, ok := secs[nums[len(nums)-1]]; ok && !strings.Contains(s.text, normalize(q)) {
					out = append(out, CitationProblem{rel, line(m[0]), fmt.Sprintf("quotes %q, which %s §%d does not say", normalize(q), SemanticsDoc, nums[len(nums)-1])})
				}
			}
		}
		for _, m := range scenarioCite.FindAllStringSubmatchIndex(src, -1) {
			n := src[m[2]:m[3]]
			if !scenarioListed(secs[12].raw, n) {
				out = append(out, CitationProblem{rel, line(m[0]), fmt.Sprintf("cites scenario %s, which %s §12 does not list", n, SemanticsDoc)})
			}
		}
		if m := namedTest.FindStringSubmatch(rel); m != nil {
			out = append(out, checkNamed(secs, rel, 1, m[3], m[4])...)
		}
		for _, m := range namedTest.FindAllStringSubmatchIndex(src, -1) {
			if m[2] >= 0 {
				out = append(out, checkNamed(secs, rel, line(m[0]), src[m[2]:m[3]], src[m[4]:m[5]])...)
			}
		}
		for _, m := range designDoc.FindAllStringIndex(src, -1) {
			out = append(out, CitationProblem{rel, line(m[0]), "cites the design notes (SEMANTICS…), a file outside the repository: cite " + SemanticsDoc})
		}
		for _, m := range trackerRef.FindAllStringIndex(src, -1) {
			if isAllowed(allowed[rel], src, m[0], m[1]) {
				continue
			}
			out = append(out, CitationProblem{rel, line(m[0]), fmt.Sprintf("cites a tracker entry (%q): cite the file that holds the rule or decision", words(src[m[0]:m[1]]))})
		}
	}
	return out, nil
}

// words joins the words of s by one space, Go comment markers left out.
func words(s string) string {
	var w []string
	for _, f := range strings.Fields(s) {
		if f != "//" && f != "#" && f != "*" {
			w = append(w, f)
		}
	}
	return strings.Join(w, " ")
}

// checkNamed checks a test or script named after a section ("Semantics",
// "rule") or a scenario ("Scenario", "scenario") number n.
func checkNamed(secs map[int]section, rel string, line int, kind, n string) []CitationProblem {
	if strings.EqualFold(kind, "scenario") {
		if !scenarioListed(secs[12].raw, n) {
			return []CitationProblem{{rel, line, fmt.Sprintf("is named after scenario %s, which %s §12 does not list", n, SemanticsDoc)}}
		}
		return nil
	}
	v, _ := strconv.Atoi(n)
	if _, ok := secs[v]; !ok {
		return []CitationProblem{{rel, line, fmt.Sprintf("is named after %s §%s, which has no such section", SemanticsDoc, n)}}
	}
	return nil
}

// scenarioListed reports whether the text of §12 lists scenario n.
func scenarioListed(text, n string) bool {
	for _, m := range scenarioItem.FindAllStringSubmatch(text, -1) {
		if m[1] == n {
			return true
		}
	}
	return false
}

// isAllowed reports whether the tracker-looking text at src[start:end]
// lies inside one of the allowed phrases of its file.
func isAllowed(phrases []string, src string, start, end int) bool {
	for _, p := range phrases {
		for off := 0; ; {
			i := strings.Index(src[off:], p)
			if i < 0 {
				break
			}
			i += off
			if i <= start && end <= i+len(p) {
				return true
			}
			off = i + 1
		}
	}
	return false
}

// ownFile reports whether rel is one of the files of this checker that must name
// what they look for: the checker itself, its test, and its rewrite table and fixtures.
func ownFile(rel string) bool {
	return rel == "internal/lint/doccheck/citations.go" || rel == "internal/lint/doccheck/citations_test.go" ||
		strings.HasPrefix(rel, "internal/lint/doccheck/testdata/")
}

// Rewrite is one rule of the citation rewrite table: in File (every file
// when empty), the words of Old, however they break across lines, become
// New.
type Rewrite struct {
	File, Old, New string
	re             *regexp.Regexp
}

// ReadRewrites reads a rewrite table: "= path" starts the rules of one
// file ("= *" of every file), then each rule is a "- old words" line
// followed by a "+ new words" line ("+" alone removes the old words);
// blank lines and lines starting with "#" are comments.
func ReadRewrites(path string) ([]Rewrite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Rewrite
	file, old, pending := "", "", false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "= "):
			file = strings.TrimSpace(line[2:])
			if file == "*" {
				file = ""
			}
		case strings.HasPrefix(line, "- ") && !pending:
			old, pending = strings.TrimSpace(line[2:]), true
		case (line == "+" || strings.HasPrefix(line, "+ ")) && pending:
			words := strings.Fields(old)
			for j, w := range words {
				words[j] = regexp.QuoteMeta(w)
			}
			re, err := regexp.Compile(strings.Join(words, gap))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
			}
			out = append(out, Rewrite{File: file, Old: old, New: strings.TrimSpace(strings.TrimPrefix(line, "+")), re: re})
			pending = false
		default:
			return nil, fmt.Errorf("%s:%d: want \"= file\", \"- old\" or \"+ new\", got %q", path, i+1, line)
		}
	}
	if pending {
		return nil, fmt.Errorf("%s: %q has no \"+\" line", path, old)
	}
	return out, nil
}

// finding is a review finding's name: "F4", "D1c", "D1b–D6".
const finding = `[A-Z]\d+[a-z]?(?:[–-][A-Z]?\d+[a-z]?)?`

// trackerRefWords is a tracker reference as the code wrote them: "issue
// 17", "issue 17 item 2", "issue 07, violation 11", "issue 11, newcomer
// item 4", "issue 17 item 2 review, defect 6", "reviewer F4", "reviewer
// findings D1b–D6", "review F3", "review r4 finding 1".
const trackerRefWords = `(?:[Ii]ssues?` + gap + `#?\d+(?:'s)?(?:,?` + gap + `(?:items?|violation|newcomer(?:` + gap + `items?)?)` + gap + `\d+(?:` + gap + `and` + gap + `\d+)?)*(?:` + gap + `review)?(?:,` + gap + `defect` + gap + `\d+)?` +
	`|[Rr]eviewers?` + gap + `(?:findings?` + gap + `)?` + finding +
	`|[Rr]eview,?` + gap + `(?:r\d+(?:` + gap + `finding` + gap + `\d+)?|defect` + gap + `\d+|` + finding + `))`

var (
	// designCite is the design notes' name in a citation.
	designCite = regexp.MustCompile(`\bSEMANTICS(?:\.md)?\b`)
	// trackerAlone is a tracker reference in parentheses of its own.
	trackerAlone = regexp.MustCompile(`(\S)(?:` + gap + `)?\(` + trackerRefWords + `\)`)
	// trackerFirst is a tracker reference first in parentheses, before
	// another reference or what it says.
	trackerFirst = regexp.MustCompile(`\(` + trackerRefWords + `[,;:]` + gap)
	// trackerAfter is a tracker reference after another one, before the
	// next, the parenthesis's end or a colon that explains.
	trackerAfter = regexp.MustCompile(`(?:[,;]|` + gap + `and)` + gap + trackerRefWords + `([)\]:;,])`)
	// trackerLead is a tracker reference that opens a sentence of a
	// comment: "Issue 17 item 2: the number of …".
	trackerLead = regexp.MustCompile(`(?m)^([ \t]*(?:(?://|#|\*)[ \t]*)?)` + trackerRefWords + `(?:,[^:\n]{0,40})?:[ \t]+([a-z])`)
)

// RewriteCitations rewrites the citations of one file's text: first the
// rules of the table for that file (rel, from the module root) and for
// every file, in order; then every remaining citation of the design notes
// ("SEMANTICS §8", "SEMANTICS.md") becomes docs/semantics.md; then a
// tracker reference in parentheses of its own, or beside another
// reference, or opening a sentence, is removed. In a Go file a comment line
// the rewrite made wider than 80 columns is wrapped. What is left is for
// the table (Citations finds it).
func RewriteCitations(rel, src string, rules []Rewrite) string {
	in := src
	for _, r := range rules {
		if r.File == "" || r.File == rel {
			src = r.re.ReplaceAllLiteralString(src, r.New)
		}
	}
	src = designCite.ReplaceAllLiteralString(src, SemanticsDoc)
	src = trackerAlone.ReplaceAllString(src, "$1")
	src = trackerFirst.ReplaceAllLiteralString(src, "(")
	src = trackerAfter.ReplaceAllString(src, "$1")
	src = trackerLead.ReplaceAllStringFunc(src, func(m string) string {
		sm := trackerLead.FindStringSubmatch(m)
		return sm[1] + strings.ToUpper(sm[2])
	})
	if strings.HasSuffix(rel, ".go") {
		src = wrapLonger(in, src)
	}
	return src
}

// maxComment is the width, in columns (a tab counts 4), up to which
// wrapLonger fills a Go comment line the rewrite made longer.
const maxComment = 80

// commentLine is a Go comment line of prose: its indentation and "// ",
// then its text (a line "//\t…" is code in a doc comment, never wrapped).
var commentLine = regexp.MustCompile(`^([ \t]*// )(\S.*)$`)

// wrapLonger breaks each comment line of out that in does not have (one
// the rewrite made) and that is wider than maxComment at its last space
// that fits, the rest on lines of the same prefix; lines the rewrite left
// alone stay as they were.
func wrapLonger(in, out string) string {
	had := map[string]bool{}
	for _, l := range strings.Split(in, "\n") {
		had[l] = true
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		m := commentLine.FindStringSubmatch(l)
		if had[l] || m == nil {
			lines = append(lines, l)
			continue
		}
		prefix, text := m[1], m[2]
		for columns(prefix+text) > maxComment {
			cut := -1
			for i := 1; i < len(text); i++ {
				if text[i] == ' ' && columns(prefix+text[:i]) <= maxComment {
					cut = i
				}
			}
			if cut < 0 {
				break
			}
			lines = append(lines, prefix+text[:cut])
			text = strings.TrimLeft(text[cut:], " ")
		}
		lines = append(lines, prefix+text)
	}
	return strings.Join(lines, "\n")
}

// columns is the width of s, a tab counting 4 columns.
func columns(s string) int {
	return utf8.RuneCountInString(s) + 3*strings.Count(s, "\t")
}

// RewriteTree applies RewriteCitations to every file Citations checks
// under root (this checker's own files left out) and returns the files it
// changed, relative to root.
func RewriteTree(root string, rules []Rewrite) ([]string, error) {
	files, err := citedFiles(root)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, rel := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out := RewriteCitations(rel, string(b), rules)
		if out == string(b) {
			continue
		}
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, rel)
	}
	return changed, nil
}
