// Package fuzzseed reads the seed corpora of Weft's fuzz targets
// (testdata/fuzz/FuzzXxx/<name>, the "go test fuzz v1" files that plain
// go test runs), so that a test can check that they are meaningful: the
// seeds named valid-* are inputs the decoder accepts, every other seed
// one it refuses.
package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Seed is one seed file: its name and its values, in order (strings and
// byte slices as strings, other values as written).
type Seed struct {
	// Name is the file's name.
	Name string
	// Values are the file's values, unquoted.
	Values []string
}

// Valid reports whether the seed is named as a valid input (valid-*).
func (s Seed) Valid() bool { return strings.HasPrefix(s.Name, "valid-") }

// Read returns the seeds of target under dir/testdata/fuzz, sorted by
// name. It fails on a file that is not a "go test fuzz v1" file of quoted
// values, and when the target has no seeds.
func Read(dir, target string) ([]Seed, error) {
	root := filepath.Join(dir, "testdata", "fuzz", target)
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []Seed
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) < 2 || lines[0] != "go test fuzz v1" {
			return nil, fmt.Errorf("%s/%s: not a go test fuzz v1 file", target, e.Name())
		}
		s := Seed{Name: e.Name()}
		for _, l := range lines[1:] {
			open := strings.IndexByte(l, '(')
			if open < 0 || !strings.HasSuffix(l, ")") {
				return nil, fmt.Errorf("%s/%s: value %q is not kind(value)", target, e.Name(), l)
			}
			v := l[open+1 : len(l)-1]
			if strings.HasPrefix(v, `"`) {
				if v, err = strconv.Unquote(v); err != nil {
					return nil, fmt.Errorf("%s/%s: %w", target, e.Name(), err)
				}
			}
			s.Values = append(s.Values, v)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no seeds", target)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
