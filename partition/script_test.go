package partition_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weftrun/weft/partition"
)

// epoch is time 0 of the scripts; times are written in seconds after it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestRebalanceScripts runs the datadriven scripts in testdata/: the
// rebalancing choice (Round.Decide), the view of the live runners
// (Members) and the judgement of a peer whose liveness key is absent
// (Judge), through a runner joining, leaving gracefully, being killed,
// a fresh survivor judging a peer, a drain's hand-off and ties
// (docs/adr/0019-partitions.md, docs/semantics.md §8). Regenerate the
// golden output with -rewrite.
//
// Commands:
//
//	round self=<id> p=<n> runners=<ids> [live=<ids>] [gone=<ids>] [unbounded=<ps>]
//	<partition> <owner>@<rev> [releasing]   (one line per owned partition)
//
// prints the assignment and the moves (the runners Gone was asked about
// are judged gone when listed in gone=);
//
//	members self=<id> now=<s> [draining]
//	<id> until=<s> assignable|watching
//
// prints the live runners, those assigned among and the expired keys;
//
//	judge lease=<s> grace=<s> since=<s> now=<s> last=unread|none|deleted|expired [expired=<s>]
//	      [fresh] [cut] [beat-in-view] [own=absent|current|behind] [put=<s>] [answered=<s>]
//
// prints "gone: <why>" or "cannot tell".
func TestRebalanceScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				switch d.Cmd {
				case "round":
					return round(t, d)
				case "members":
					return members(t, d)
				case "judge":
					return judge(t, d)
				}
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			})
		})
	}
}

func arg(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

func list(d *datadriven.TestData, key string) []string {
	v, _ := arg(d, key)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func seconds(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	v, ok := arg(d, key)
	if !ok {
		d.Fatalf(t, "%s= missing", key)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, v, err)
	}
	return time.Duration(f * float64(time.Second))
}

func at(t *testing.T, d *datadriven.TestData, key string) time.Time {
	return epoch.Add(seconds(t, d, key))
}

func round(t *testing.T, d *datadriven.TestData) string {
	self, _ := arg(d, "self")
	n, err := strconv.Atoi(func() string { v, _ := arg(d, "p"); return v }())
	if err != nil {
		d.Fatalf(t, "p=: %v", err)
	}
	live := map[string]bool{}
	for _, id := range list(d, "live") {
		live[id] = true
	}
	gone := list(d, "gone")
	unbounded := map[int]bool{}
	for _, p := range list(d, "unbounded") {
		i, _ := strconv.Atoi(p)
		unbounded[i] = true
	}
	table := make([]partition.Slot, n)
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p, err := strconv.Atoi(f[0])
		if err != nil || p < 0 || p >= n || len(f) < 2 {
			d.Fatalf(t, "bad table line %q", line)
		}
		owner, rev, _ := strings.Cut(f[1], "@")
		r, _ := strconv.ParseUint(rev, 10, 64)
		table[p] = partition.Slot{Owner: owner, Rev: r, Releasing: len(f) > 2 && f[2] == "releasing"}
	}
	var asked []string
	r := partition.Round{Self: self, Runners: list(d, "runners"), Live: live,
		Gone: func(id string) bool {
			asked = append(asked, id)
			return slices.Contains(gone, id)
		},
		Unbounded: func(p int) bool { return unbounded[p] }}
	var b strings.Builder
	b.WriteString("assigned:")
	for p := range n {
		fmt.Fprintf(&b, " %d=%s", p, partition.Owner(p, r.Runners))
	}
	b.WriteString("\n")
	moves := r.Plan(table)
	for _, m := range moves {
		switch m.Do {
		case partition.Claim:
			if m.Previous != "" {
				fmt.Fprintf(&b, "claim %d from %s at %d\n", m.Partition, m.Previous, m.Rev)
			} else {
				fmt.Fprintf(&b, "claim %d\n", m.Partition)
			}
		case partition.Release:
			fmt.Fprintf(&b, "release %d at %d\n", m.Partition, m.Rev)
		default:
			fmt.Fprintf(&b, "%s %d\n", m.Do, m.Partition)
		}
	}
	if len(moves) == 0 {
		b.WriteString("no move\n")
	}
	slices.Sort(asked)
	if asked = slices.Compact(asked); len(asked) > 0 {
		fmt.Fprintf(&b, "judged: %s\n", strings.Join(asked, ","))
	}
	return b.String()
}

func members(t *testing.T, d *datadriven.TestData) string {
	self, _ := arg(d, "self")
	_, draining := arg(d, "draining")
	view := map[string]partition.Member{}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || !strings.HasPrefix(f[1], "until=") {
			d.Fatalf(t, "bad view line %q", line)
		}
		s, err := strconv.ParseFloat(strings.TrimPrefix(f[1], "until="), 64)
		if err != nil {
			d.Fatalf(t, "bad view line %q: %v", line, err)
		}
		view[f[0]] = partition.Member{Assignable: f[2] == "assignable", Until: epoch.Add(time.Duration(s * float64(time.Second)))}
	}
	live, runners, expired := partition.Members(view, self, draining, at(t, d, "now"))
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return fmt.Sprintf("live: %s\nrunners: %s\nexpired: %s\n", strings.Join(ids, ","), strings.Join(runners, ","), strings.Join(expired, ","))
}

func judge(t *testing.T, d *datadriven.TestData) string {
	f := partition.Facts{
		Lease:          seconds(t, d, "lease"),
		ReconnectGrace: seconds(t, d, "grace"),
		Since:          at(t, d, "since"),
		Now:            at(t, d, "now"),
	}
	_, f.Fresh = arg(d, "fresh")
	_, f.Cut = arg(d, "cut")
	_, f.BeatInView = arg(d, "beat-in-view")
	switch last, _ := arg(d, "last"); last {
	case "unread":
		f.Last = partition.LastUnread
	case "none":
		f.Last = partition.LastNone
	case "deleted":
		f.Last = partition.LastDeleted
	case "expired":
		f.Last, f.ExpiredAt = partition.LastExpired, at(t, d, "expired")
	default:
		d.Fatalf(t, "last=%s", last)
	}
	switch own, _ := arg(d, "own"); own {
	case "", "absent":
	case "current", "behind":
		f.OwnKey, f.OwnCurrent = true, own == "current"
		f.OwnPut, f.Answered = at(t, d, "put"), at(t, d, "answered")
	default:
		d.Fatalf(t, "own=%s", own)
	}
	if gone, why := partition.Judge(f); gone {
		return "gone: " + why + "\n"
	}
	return "cannot tell\n"
}
