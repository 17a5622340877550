// Package firsthour tests a newcomer's first hour with Weft as README.md
// describes it, from outside and verbatim: in a fresh clone of the
// checkout, with Go's module and build caches in folders of their own (as
// many CI systems and Nix set GOMODCACHE and GOCACHE), the README's first
// command (weft dev, through go run) runs in
// a terminal (a pseudo-terminal), every step it prints runs in a second
// shell of that clone, exactly as printed, and Ctrl-C stops it. It also
// checks that the README's commands are what CI runs. It has no code
// besides its tests. It is in the test module e2e/ui, so that creack/pty
// is not in the module graph of an application importing Weft
// (docs/adr/0038).
package firsthour
