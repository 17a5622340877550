//go:build unix

package firsthour

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/weftrun/weft/internal/syncbuf"
)

// Deadlines are generous: the machine may be loaded by the rest of the
// suite, and nothing here measures speed.
const (
	// firstBuild bounds the first go run in the clone: with the test's
	// own build cache empty (the first run on a machine) it compiles
	// everything, as a newcomer's does; later runs find the cache kept
	// (homeDir) and only link, or not even that.
	firstBuild = 10 * time.Minute
	// oneCommand bounds one printed step (go run checks the build is up
	// to date, then runs the cached binary).
	oneCommand = 3 * time.Minute
	// shows bounds the re-running of a step until it shows what the demo
	// says it will, as a person re-runs a show until the run got there.
	shows = 2 * time.Minute
)

// A newcomer with only
// the README gets through. In a fresh clone of this checkout (with the
// work tree's uncommitted changes, so that it tests what is on disk), the
// README's first command runs in a terminal (a pty, as a person's);
// every step it prints — the weft CLI's and the nats CLI's — runs in a
// second shell of the clone, exactly as printed, in order, each
// succeeding and showing what the demo says it will (the approval, the
// uncertain payment and its reconciliation, the open question and its
// resolution, the refund's settlement);
// the demo terminal shows one line per event as it happens; Ctrl-C stops
// it with the hand-off line. Then, as the demo's note says, go install
// puts weft on the PATH, and weft dev on the same store prints its steps
// spelled weft with run ids the store does not have yet; Ctrl-C while a
// run waits only for its approval hands nothing off (the run is idle:
// ADR 0019), and weft exits 0.
func TestNewcomerFollowsTheREADME(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("go is not on PATH: the README's commands need it")
	}
	natsDir := natsCLIDir(t)
	tmp := t.TempDir()
	home := homeDir(t)
	clone := cloneCheckout(t, filepath.Join(home, "weft"))
	readme := readmeCommands(t, filepath.Join(clone, "README.md"))

	// A newcomer's environment: nothing of Weft's set; the store under
	// XDG_STATE_HOME (the README's default location), and WEFT_LISTEN=0
	// so that the embedded server takes a free port instead of 4222,
	// which another test or demo on this machine may hold (the README
	// names WEFT_LISTEN for that). Go's module and build caches are
	// folders of their own (goCaches), as many CI systems and Nix set
	// them: go run then runs the binary it cached there.
	state := filepath.Join(tmp, "state")
	env := newcomerEnv(append(goCaches(t, home), "XDG_STATE_HOME="+state, "WEFT_LISTEN=0")...)

	// First terminal: the README's first command.
	begin := time.Now()
	build := firstBuild
	if d, ok := t.Deadline(); ok && time.Until(d)-2*time.Minute < build {
		build = time.Until(d) - 2*time.Minute // fail with what the terminal shows, not go test's panic
	}
	demo := startTerminal(t, clone, env, readme.demo)
	out := demo.waitFor(t, build, "What the runs do is printed here as it happens")
	t.Logf("the README's first command printed its steps after %.1f s", time.Since(begin).Seconds())
	if c, r := strings.Index(out, "\nConsole: http://127.0.0.1:"), strings.Index(out, "\nWeft dev is running"); c < 0 || c > r {
		t.Errorf("the console's address is not printed first, as the README says:\n%s", out)
	}
	printed := parseSteps(t, out)
	if !sameDir(printed.dir, clone) {
		t.Fatalf("the steps say to run them in %q, not in the clone %q", printed.dir, clone)
	}
	if !strings.Contains(out, "(The first go run compiled weft") {
		t.Errorf("a go run demo does not say what the first build cost:\n%s", out)
	}
	// The README lists the same commands, in the same order (with the
	// default port).
	var got []string
	for _, st := range printed.weft {
		got = append(got, strings.ReplaceAll(command(st), printed.url, "nats://127.0.0.1:4222"))
	}
	if strings.Join(got, "\n") != strings.Join(readme.steps, "\n") {
		t.Errorf("the README's steps are not the printed ones:\nREADME:\n%s\nprinted:\n%s", strings.Join(readme.steps, "\n"), strings.Join(got, "\n"))
	}

	// Second terminal: every printed step, verbatim, in order.
	sh := startShell(t, clone, append(env, "PATH="+natsDir+string(os.PathListSeparator)+os.Getenv("PATH")))
	weft := strings.TrimSuffix(readme.demo, " dev")
	var waited bool
	for _, st := range printed.weft {
		cmd := command(st)
		switch {
		case cmd == "export NATS_URL="+printed.url:
			sh.ok(t, st)
		case strings.HasPrefix(cmd, weft+" start payment-desk "):
			run := cmd[strings.LastIndex(cmd, " ")+1:]
			sh.ok(t, st, "run "+run+": ")
		case cmd == weft+" inbox approvals":
			sh.until(t, st, "pay-7 ", "2/call_2_1", "send_payment", "finance")
		case strings.HasPrefix(cmd, weft+" approve pay-7 2/call_2_1 "):
			sh.ok(t, st, "run pay-7: ")
		case cmd == weft+" show pay-7":
			sh.until(t, st, "status     finished: completed", `"status":"sent"`, "send_payment    succeeded")
		case cmd == weft+" show pay-13":
			// The command it shows is spelled as the steps are: it works
			// here, where no weft is installed.
			sh.until(t, st, "status     suspended", "effect uncertain: 2/call_2_1 send_payment", "reconcile: "+weft+" reconcile pay-13 2/call_2_1 --output")
		case strings.HasPrefix(cmd, weft+" reconcile pay-13 2/call_2_1 --unconfirmed "):
			sh.ok(t, st, "run pay-13: ")
		case cmd == weft+" inbox questions":
			sh.until(t, st, "pay-13 ", "2/call_2_1", "send_payment", `"invoice":"INV-13"`, "checking with the bank")
		case strings.HasPrefix(cmd, weft+" resolve pay-13 2/call_2_1 "):
			// The run stays as it was: finished.
			sh.ok(t, st, "run pay-13: finished")
		case cmd == weft+" show refund-8":
			// Whether a show catches the wait depends on the timing; the
			// timeline (next step) records it in any case.
			s := sh.until(t, st, "status     finished: completed", `"id":"refund-INV-8"`)
			waited = waited || strings.Contains(s, "waiting for a settlement")
		case cmd == weft+" events refund-8":
			sh.ok(t, st, "attempt_lost action=1/call_1_1 attempt=1 cause=timed_out next=settle", "(waiting for a settlement until ",
				"settlement_accepted action=1/call_1_1", "run_finished outcome=completed")
		default:
			t.Fatalf("a printed step this test does not know (say what it shows here): %s", st)
		}
	}
	t.Logf("a show of refund-8 caught it waiting for its settlement: %v", waited)
	nats := "nats --server " + printed.url + " "
	for _, st := range printed.nats {
		switch {
		case st == nats+"micro ls":
			sh.ok(t, st, "weft", "weft-query")
		case strings.HasPrefix(st, nats+"req weft.api.start "):
			sh.ok(t, st, `"run":"pay-7-nats"`)
		case strings.HasPrefix(st, nats+"req weft.api.query.approvals "):
			sh.until(t, st, `"run":"pay-7-nats"`)
		case strings.HasPrefix(st, nats+"req weft.api.approve "):
			sh.ok(t, st, `"run":"pay-7-nats"`)
		case strings.HasPrefix(st, nats+"req weft.api.query.run "):
			sh.until(t, st, `"status":"finished"`, `"kind":"completed"`)
		default:
			t.Fatalf("a printed nats step this test does not know: %s", st)
		}
	}

	// The demo terminal showed what the runs did as it happened.
	out = demo.output()
	for _, want := range []string{
		"pay-7 #", "approval_requested action=2/call_2_1", "approval_answered action=2/call_2_1",
		"pay-13 #", "reconciled action=2/call_2_1", "resolved action=2/call_2_1",
		"refund-8 #", "settlement_accepted action=1/call_1_1", "pay-7-nats #", "run_finished outcome=completed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo terminal does not show %q:\n%s", want, out)
		}
	}
	// Ctrl-C: every run has finished, nothing was handed off.
	demo.interrupt(t)
	code := demo.wait(t)
	if out := demo.output(); !strings.Contains(out, "\nStopped: no run was in flight; nothing handed off.\n") {
		t.Errorf("no hand-off line after Ctrl-C:\n%s", out)
	}
	// The status the shell sees is the go command's, not weft's: cmd/go
	// sets 1 whenever it was interrupted, whatever its program's status
	// (the README says so). weft's own 0 is checked below, installed.
	t.Logf("go run exited %d after Ctrl-C", code)

	// As the demo's note says, go install puts weft on the PATH (here a
	// GOBIN of the test's, not the machine's); then weft dev on the same
	// store prints the steps spelled weft, with run ids the store does not
	// have yet, and Ctrl-C while a run waits for its approval hands that
	// run off and exits 0.
	install := strings.Replace(weft, "go run ", "go install ", 1)
	if !strings.Contains(out, install+" puts weft on your PATH") {
		t.Errorf("the demo does not say %q puts weft on the PATH:\n%s", install, out)
	}
	bin := filepath.Join(filepath.Dir(clone), "bin") // beside the clone: kept with the fixed one, so an unchanged weft is not linked again
	sh.ok(t, "GOBIN="+bin+" "+install)
	sh.ok(t, "export PATH="+bin+":$PATH")
	demo = startTerminal(t, clone, append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), "weft dev")
	out = demo.waitFor(t, oneCommand, "What the runs do is printed here as it happens")
	again := parseSteps(t, out)
	if again.dir != "" {
		t.Errorf("an installed weft's steps name a directory (%s): they work in any", again.dir)
	}
	for _, want := range []string{"  weft start payment-desk \"pay invoice INV-7\" --run pay-7-2 ", "--run pay-13-2 ", "--run refund-8-2 ", `"run":"pay-7-nats-2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the restarted demo's steps lack %q:\n%s", want, out)
		}
	}
	for _, st := range again.weft[:3] {
		cmd := command(st)
		switch {
		case cmd == "export NATS_URL="+again.url:
			sh.ok(t, st)
		case strings.HasPrefix(cmd, "weft start payment-desk "):
			sh.ok(t, st, "run pay-7-2: ")
		case cmd == "weft inbox approvals":
			sh.until(t, st, "pay-7-2 ", "2/call_2_1")
		default:
			t.Fatalf("the restarted demo's first steps changed: %s", st)
		}
	}
	demo.waitFor(t, shows, "pay-7-2 #", "approval_requested action=2/call_2_1")
	demo.interrupt(t)
	if code := demo.wait(t); code != 0 {
		t.Errorf("weft dev exited %d after Ctrl-C, want 0:\n%s", code, demo.output())
	}
	out = demo.output()
	// pay-7-2 waits only for a person: with partitioned runners (ADR 0019)
	// such an idle run is not in memory and needs no hand-off; the next
	// runner reads it back when the approval comes (recovery cause idle).
	// The stop line tells the newcomer it continues on the next weft dev.
	for _, want := range []string{"\nStopped: no run was in flight; nothing handed off. Run pay-7-2 waits for a person: the next weft dev on "} {
		if !strings.Contains(out, want) {
			t.Errorf("after Ctrl-C with pay-7-2 waiting, the demo terminal lacks %q:\n%s", want, out)
		}
	}
}

// The README's second
// command is the one .ci/run runs (its first is the one
// TestNewcomerFollowsTheREADME runs).
func TestREADMETestCommandIsWhatCIRuns(t *testing.T) {
	root := repoRoot(t)
	readme := readmeCommands(t, filepath.Join(root, "README.md"))
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(ci), "\n") {
		found = found || strings.TrimSpace(line) == readme.test
	}
	if !found {
		t.Errorf(".ci/run does not run the README's test command %q:\n%s", readme.test, ci)
	}
	if readme.demo != "go run -tags nosdk ./cmd/weft dev" {
		t.Errorf("the README's first command is %q; the demo's printed steps and this package expect go run -tags nosdk ./cmd/weft dev", readme.demo)
	}
}

// readme holds the commands of the README's "Two commands" section.
type readme struct {
	demo, test string
	steps      []string // the steps weft dev prints, without comments
}

// readmeCommands reads the sh blocks of the README's "## Two commands":
// the demo command, the test command and the printed steps.
func readmeCommands(t *testing.T, path string) readme {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Two commands\n")
	if !ok {
		t.Fatal("README.md has no ## Two commands section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var blocks [][]string
	for _, part := range strings.Split(sec, "```sh\n")[1:] {
		body, _, ok := strings.Cut(part, "\n```")
		if !ok {
			t.Fatal("README.md: an unclosed sh block")
		}
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if l = strings.TrimSpace(command(l)); l != "" {
				lines = append(lines, l)
			}
		}
		blocks = append(blocks, lines)
	}
	if len(blocks) != 3 || len(blocks[0]) != 1 || len(blocks[1]) != 1 {
		t.Fatalf("README.md's Two commands: want a demo command, a test command and the printed steps, got %q", blocks)
	}
	return readme{demo: blocks[0][0], test: blocks[1][0], steps: blocks[2]}
}

var comment = regexp.MustCompile(`\s+#\s.*$`)

// command is a printed line without its trailing shell comment.
func command(line string) string { return comment.ReplaceAllString(line, "") }

// steps are the lines weft dev printed to try next.
type steps struct {
	dir, url   string
	weft, nats []string
}

var (
	tryIt   = regexp.MustCompile(`(?m)^Try it \(another terminal(?:, in (.+))?\):$`)
	natsURL = regexp.MustCompile(`^export NATS_URL=(nats://127\.0\.0\.1:\d+)$`)
)

// parseSteps reads the printed steps: the directory "Try it" names (none
// for an installed weft), the indented lines after it up to the nats
// CLI's, and those up to the closing paragraph.
func parseSteps(t *testing.T, out string) steps {
	t.Helper()
	m := tryIt.FindStringSubmatchIndex(out)
	if m == nil {
		t.Fatalf("no Try it line:\n%s", out)
	}
	s := steps{}
	if m[2] >= 0 {
		s.dir = out[m[2]:m[3]]
	}
	in := &s.weft
	for _, line := range strings.Split(out[m[1]:], "\n") {
		switch {
		case strings.HasPrefix(line, "Or with the nats CLI only"):
			in = &s.nats
		case strings.HasPrefix(line, "What the runs do"):
			if len(s.weft) == 0 || len(s.nats) == 0 {
				t.Fatalf("steps not found:\n%s", out)
			}
			if u := natsURL.FindStringSubmatch(s.weft[0]); u != nil {
				s.url = u[1]
			} else {
				t.Fatalf("the first step is not export NATS_URL=…: %s", s.weft[0])
			}
			return s
		case strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "":
			*in = append(*in, strings.TrimPrefix(line, "  "))
		}
	}
	t.Fatalf("the steps do not end:\n%s", out)
	return s
}

func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// repoRoot is the top of the checkout this package lies in.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v (the test clones the checkout: it needs git)", err)
	}
	return strings.TrimSpace(string(out))
}

// homeDir returns the directory of the clone (weft) and of its Go caches
// (goCaches): a fixed directory, weft-firsthour under the user's cache
// directory (os.UserCacheDir: $XDG_CACHE_HOME or ~/.cache on Linux, where
// Go's own build cache is), when no other run of this test holds it, so
// that the caches, and Go's build cache's compilations of the clone's
// packages (keyed on their directory), are still there from the previous
// run on this machine (the first go run then only links, or not even
// that; the first run on a machine compiles everything, as a newcomer's
// does); else, when another run holds it, a directory of this test's own
// (t.TempDir). The clone is removed after every run; the caches and the
// weft the README's go install built (bin) are kept on purpose. They are
// bounded: the module cache holds the module's dependencies (0.3 GB), the
// build cache what Go compiled for them and for the clone (1.8 GB on
// this machine; Go trims entries unused for five days), bin one binary.
// They are not in the temporary directory, which the test task checks
// the tests leave empty (internal/tmpcheck); rm -rf the directory the
// test logs to get their space back.
func homeDir(t *testing.T) string {
	t.Helper()
	base := filepath.Join(os.TempDir(), "weft-firsthour")
	if cache, err := os.UserCacheDir(); err == nil {
		base = filepath.Join(cache, "weft-firsthour")
	}
	t.Logf("the Go caches of the clone: %s (kept across runs; remove it to get its space back)", base)
	if err := os.MkdirAll(base, 0o755); err == nil {
		lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err == nil {
			if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				dir := filepath.Join(base, "weft")
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				// Registered before the terminals' cleanups, so run after
				// them: nothing runs in dir any more.
				t.Cleanup(func() { os.RemoveAll(dir); lock.Close() })
				return base
			}
			lock.Close()
		}
	}
	t.Logf("another run of this test holds %s: cloning into a directory of its own, with Go caches of its own (everything compiles anew)", base)
	return t.TempDir()
}

// goCaches returns the environment that gives the clone's go commands
// module and build caches of their own, in home: GOCACHE and GOMODCACHE
// there (names without "go-build", which nothing may rely on). The module
// cache fills from this machine's module cache, used as a read-only
// module proxy ahead of $GOPROXY (which the go command falls back to for
// what it lacks), so that the test neither downloads what is here nor
// stops CI for long; -modcacherw lets the test's temp dirs be removed.
func goCaches(t *testing.T, home string) []string {
	t.Helper()
	goEnv := func(name string) string {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	proxy := goEnv("GOPROXY")
	if dl := filepath.Join(goEnv("GOMODCACHE"), "cache", "download"); dirExists(dl) {
		proxy = "file://" + filepath.ToSlash(dl) + "," + proxy
	}
	flags := strings.TrimSpace(goEnv("GOFLAGS") + " -modcacherw")
	return []string{
		"GOCACHE=" + filepath.Join(home, "cache", "build"),
		"GOMODCACHE=" + filepath.Join(home, "cache", "mod"),
		"GOPROXY=" + proxy,
		"GOFLAGS=" + flags,
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// cloneCheckout clones the checkout into dst and copies over the work
// tree's changes (modified, deleted and untracked files that git does not
// ignore), so that the clone is what a newcomer would get from this work
// tree once committed.
func cloneCheckout(t *testing.T, dst string) string {
	t.Helper()
	root := repoRoot(t)
	if out, err := exec.Command("git", "clone", "--quiet", root, dst).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--modified", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	n := 0
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" {
			continue
		}
		src, to := filepath.Join(root, rel), filepath.Join(dst, rel)
		b, err := os.ReadFile(src)
		switch {
		case os.IsNotExist(err):
			err = os.Remove(to)
		case err == nil:
			var fi os.FileInfo
			if fi, err = os.Stat(src); err == nil {
				if err = os.MkdirAll(filepath.Dir(to), 0o755); err == nil {
					err = os.WriteFile(to, b, fi.Mode().Perm())
				}
			}
		}
		if err != nil && !os.IsNotExist(err) {
			t.Fatalf("copy the work tree's %s into the clone: %v", rel, err)
		}
		n++
	}
	if n > 0 {
		t.Logf("the clone has the work tree's %d uncommitted changes", n)
	}
	return dst
}

// newcomerEnv is this process's environment without any Weft, NATS or
// model provider setting, plus extra.
func newcomerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "WEFT_"), strings.HasPrefix(k, "NATS_"), strings.HasPrefix(k, "OTEL_"),
			strings.HasPrefix(k, "OPENAI_"), strings.HasPrefix(k, "ANTHROPIC_"), k == "XDG_STATE_HOME",
			k == "GOCACHE", k == "GOMODCACHE", k == "GOPROXY", k == "GOFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// natsCLIDir is the directory of the nats CLI (the one go tool -modfile=devtools/go.mod task test
// installs: go install github.com/nats-io/natscli/nats@v0.5.0), for the
// second shell's PATH. The test fails, never skips, without it.
func natsCLIDir(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return filepath.Dir(p)
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "nats")); err == nil {
			return d
		}
	}
	t.Fatal("the nats CLI is not installed (go tool -modfile=devtools/go.mod task nats-cli, or go install github.com/nats-io/natscli/nats@v0.5.0): the demo prints nats steps")
	return ""
}

// terminal is a command running in a pseudo-terminal of its own, as in a
// person's terminal window: its own session, whose foreground process
// group Ctrl-C interrupts.
type terminal struct {
	cmd  *exec.Cmd
	pty  *os.File
	out  *syncbuf.Buffer
	done chan struct{} // closed when the pty's output ended
	code int
}

// startTerminal runs line with bash -c in dir, in a new pty.
func startTerminal(t *testing.T, dir string, env []string, line string) *terminal {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", line)
	cmd.Dir, cmd.Env = dir, append(env, "TERM=dumb")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		t.Fatalf("start %q in a pty: %v", line, err)
	}
	tm := &terminal{cmd: cmd, pty: f, out: &syncbuf.Buffer{}, done: make(chan struct{}), code: -1}
	go func() {
		defer close(tm.done)
		_, _ = io.Copy(tm.out, f) // ends with EIO once the session has exited
	}()
	t.Cleanup(func() {
		if tm.cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its session's process group
			_ = cmd.Wait()
		}
		f.Close()
	})
	return tm
}

// output is what the program in the terminal wrote: what the terminal
// showed, with the pty's CRLF as LF and without the terminal's own echo
// of Ctrl-C (^C).
func (tm *terminal) output() string {
	return strings.ReplaceAll(strings.ReplaceAll(tm.out.String(), "\r\n", "\n"), "^C", "")
}

// waitFor waits until the terminal shows every one of want and returns
// what it showed.
func (tm *terminal) waitFor(t *testing.T, within time.Duration, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		out := tm.output()
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return out
		}
		select {
		case <-tm.done:
			t.Fatalf("the terminal's command ended before it showed %q:\n%s", missing, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %s:\n%s", missing, within, out)
		}
	}
}

// interrupt types Ctrl-C.
func (tm *terminal) interrupt(t *testing.T) {
	t.Helper()
	if _, err := tm.pty.Write([]byte{3}); err != nil {
		t.Fatalf("Ctrl-C: %v", err)
	}
}

// wait waits for the terminal's command to end and returns its exit code.
func (tm *terminal) wait(t *testing.T) int {
	t.Helper()
	ended := make(chan error, 1)
	go func() { ended <- tm.cmd.Wait() }()
	select {
	case <-ended:
	case <-time.After(oneCommand):
		t.Fatalf("still running %s after Ctrl-C:\n%s", oneCommand, tm.output())
	}
	select {
	case <-tm.done:
	case <-time.After(10 * time.Second):
	}
	return tm.cmd.ProcessState.ExitCode()
}

// shell is a second terminal: one bash, which reads the lines it runs
// from a pipe of its own (fd 3), so that the commands get no stdin to read
// the next lines from.
type shell struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *syncbuf.Buffer
	n    int
	seen int // how much of out the previous steps used
}

func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "/dev/fd/3")
	out := &syncbuf.Buffer{}
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() {
		w.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return &shell{cmd: cmd, in: w, out: out}
}

// run types line and returns its exit code and output.
func (s *shell) run(t *testing.T, line string) (int, string) {
	t.Helper()
	s.n++
	start := time.Now()
	defer func() { t.Logf("(%s took %.1f s)", line, time.Since(start).Seconds()) }()
	marker := fmt.Sprintf("::firsthour step %d exit ", s.n)
	if _, err := fmt.Fprintf(s.in, "%s\necho \"\n%s$?\"\n", line, marker); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	end := regexp.MustCompile(regexp.QuoteMeta(marker) + `(\d+)\n`)
	for deadline := time.Now().Add(oneCommand); ; time.Sleep(50 * time.Millisecond) {
		all := s.out.String()
		if m := end.FindStringSubmatchIndex(all[s.seen:]); m != nil {
			out := all[s.seen : s.seen+m[0]]
			code := 0
			fmt.Sscan(all[s.seen+m[2]:s.seen+m[3]], &code)
			s.seen += m[1]
			return code, strings.TrimSuffix(out, "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no end within %s:\n%s", line, oneCommand, all[s.seen:])
		}
	}
}

// ok runs line once: it must exit 0, answer no error reply and show every
// one of want.
func (s *shell) ok(t *testing.T, line string, want ...string) string {
	t.Helper()
	code, out := s.run(t, line)
	if code != 0 || strings.Contains(out, "Nats-Service-Error") {
		t.Fatalf("$ %s\nexit %d:\n%s", line, code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("$ %s\ndoes not show %q:\n%s", line, w, out)
		}
	}
	t.Logf("$ %s\n%s", line, out)
	return out
}

// until runs line, as a person re-runs a query until it shows what they
// wait for, until it shows every one of want; each run must succeed.
func (s *shell) until(t *testing.T, line string, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(shows); ; time.Sleep(300 * time.Millisecond) {
		code, out := s.run(t, line)
		if code != 0 || strings.Contains(out, "Nats-Service-Error") {
			t.Fatalf("$ %s\nexit %d:\n%s", line, code, out)
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(out, w)
		}
		if all {
			t.Logf("$ %s\n%s", line, out)
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("$ %s\nshowed, after %s, not all of %q:\n%s", line, shows, want, out)
		}
	}
}
