//go:build !nosdk

package provider_test

import (
	"testing"

	"github.com/weftrun/weft/model/anthropic"
	"github.com/weftrun/weft/model/openai"
	"github.com/weftrun/weft/model/provider"
)

// The provider names are the adapters' own, and a default build has the
// SDKs.
func TestProviderNamesAreTheAdapters(t *testing.T) {
	if provider.OpenAI != openai.Provider || provider.Anthropic != anthropic.Provider {
		t.Fatalf("provider names %q, %q; adapters %q, %q", provider.OpenAI, provider.Anthropic, openai.Provider, anthropic.Provider)
	}
	if !provider.SDKs() {
		t.Fatal("a build without the nosdk tag reports no SDKs")
	}
}
