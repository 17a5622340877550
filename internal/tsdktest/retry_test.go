package tsdktest_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/weftrun/weft"
)

// TestRetryRules_TheTypeScriptRetryableCodesAreWeftCodeRetryable keeps the
// TypeScript SDK's list of retryable codes (RETRYABLE_CODES in
// sdk/typescript/src/errors.js) equal to weft.Code.Retryable (error.go),
// the one table (docs/protocol.md, "Retry rules"): of every code the SDK
// knows (its CODES, which sdk/typescript/test/errors.test.js keeps equal
// to docs/protocol.md's error table), exactly those Retryable accepts are
// listed.
func TestRetryRules_TheTypeScriptRetryableCodesAreWeftCodeRetryable(t *testing.T) {
	src, err := os.ReadFile("../../sdk/typescript/src/errors.js")
	if err != nil {
		t.Fatal(err)
	}
	listed, all := jsRetryable(t, string(src))
	if len(all) < 20 {
		t.Fatalf("only %d codes read from CODES: the parse is broken", len(all))
	}
	if want, ok := sameRetryable(listed, all); !ok {
		t.Errorf("sdk/typescript/src/errors.js RETRYABLE_CODES lists %v; weft.Code.Retryable accepts %v", listed, want)
	}
}

// sameRetryable reports whether listed names exactly the codes of all
// that weft.Code.Retryable accepts, and returns those.
func sameRetryable(listed, all []string) ([]string, bool) {
	var want []string
	for _, c := range all {
		if weft.Code(c).Retryable() {
			want = append(want, c)
		}
	}
	listed = slices.Sorted(slices.Values(listed))
	slices.Sort(want)
	return want, slices.Equal(listed, want)
}

// jsRetryable reads RETRYABLE_CODES and the keys of CODES from errors.js.
func jsRetryable(t *testing.T, src string) (listed, all []string) {
	t.Helper()
	m := regexp.MustCompile(`(?s)export const RETRYABLE_CODES = Object\.freeze\(\[(.*?)\]\)`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("errors.js has no RETRYABLE_CODES = Object.freeze([...])")
	}
	for _, q := range regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(m[1], -1) {
		listed = append(listed, q[1])
	}
	c := regexp.MustCompile(`(?s)export const CODES = Object\.freeze\(\{(.*?)\}\)`).FindStringSubmatch(src)
	if c == nil {
		t.Fatal("errors.js has no CODES = Object.freeze({...})")
	}
	for _, k := range regexp.MustCompile(`(?m)^\s*([a-z_]+):\s*\d+,`).FindAllStringSubmatch(c[1], -1) {
		all = append(all, k[1])
	}
	return listed, all
}

// TestRetryRules_TheTypeScriptTableCheckFindsADifference keeps the check
// honest: a list that misses a retryable code, or adds another, is found.
func TestRetryRules_TheTypeScriptTableCheckFindsADifference(t *testing.T) {
	for _, list := range []string{`"runner_busy", "contended", "conflict", "unavailable"`, `"runner_busy", "contended", "conflict", "unavailable", "settle_unconfirmed", "internal"`} {
		src := "export const CODES = Object.freeze({\n  runner_busy: 503,\n  internal: 500,\n});\nexport const RETRYABLE_CODES = Object.freeze([" + list + "]);\n"
		listed, _ := jsRetryable(t, src)
		if _, ok := sameRetryable(listed, []string{"runner_busy", "contended", "conflict", "unavailable", "settle_unconfirmed", "internal"}); ok {
			t.Errorf("the list %s was taken for weft.Code.Retryable's", list)
		}
	}
}
