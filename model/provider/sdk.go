//go:build !nosdk

package provider

import (
	"os"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic"
	"github.com/weftrun/weft/model/openai"
)

const sdks = true

// open opens the adapter s names (already checked by Open).
func open(s Spec, opts Options) (model.Model, error) {
	switch s.Provider {
	case openai.Provider:
		key := opts.APIKey
		if key == "" {
			key = os.Getenv(EnvOpenAIKey)
		}
		o := []openai.Option{openai.WithMaxTokens(opts.MaxTokens)}
		if key != "" {
			o = append(o, openai.WithAPIKey(key))
		}
		if opts.BaseURL != "" {
			o = append(o, openai.WithBaseURL(opts.BaseURL))
		}
		if opts.HTTPClient != nil {
			o = append(o, openai.WithHTTPClient(opts.HTTPClient))
		}
		return openai.New(s.Model, o...), nil
	default:
		key := opts.APIKey
		if key == "" {
			key = os.Getenv(EnvAnthropicKey)
		}
		o := []anthropic.Option{anthropic.WithMaxTokens(opts.MaxTokens), anthropic.WithThinking(opts.ThinkingBudget)}
		if key != "" {
			o = append(o, anthropic.WithAPIKey(key))
		}
		if opts.BaseURL != "" {
			o = append(o, anthropic.WithBaseURL(opts.BaseURL))
		}
		if opts.HTTPClient != nil {
			o = append(o, anthropic.WithHTTPClient(opts.HTTPClient))
		}
		return anthropic.New(s.Model, o...), nil
	}
}
