// Package provider opens a model adapter from configuration, so that a
// command (the runner, `weft dev`) can point an agent at a real model with
// a flag or an environment variable instead of code:
//
//	WEFT_MODEL=openai:gpt-4.1                 # or anthropic:claude-sonnet-4-5
//	OPENAI_API_KEY=…  / ANTHROPIC_API_KEY=…   # the provider's usual key variable
//	WEFT_MODEL_BASE_URL=http://localhost:11434/v1   # optional: Ollama, vLLM, LM Studio, a gateway
//
// The model part of a spec is everything after the first colon, so
// "openai:llama3.1:8b" names Ollama's llama3.1:8b. FromEnv returns
// ErrNotConfigured when WEFT_MODEL is unset; callers such as `weft dev` then
// fall back to the scripted model and say so, using Describe.
//
// The adapters' SDKs (model/openai, model/anthropic) are three quarters of
// a cold build of cmd/weft. A binary built with the build tag nosdk
// (`go run -tags nosdk ./cmd/weft dev`, the README's first command) leaves
// them out: everything works but Open, which then fails with
// ErrNotBuiltIn naming the command line that builds them in.
package provider

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/weftrun/weft/model"
)

// The environment variables read by ConfigFromEnv.
const (
	// EnvModel holds the spec, "openai:<model>" or "anthropic:<model>".
	EnvModel = "WEFT_MODEL"
	// EnvBaseURL overrides the provider's base URL.
	EnvBaseURL = "WEFT_MODEL_BASE_URL"
	// EnvAPIKey names the variable holding an API key that, when set,
	// overrides the provider's own key variable.
	EnvAPIKey = "WEFT_MODEL_API_KEY"
	// EnvMaxTokens sets the output token limit of a turn.
	EnvMaxTokens = "WEFT_MODEL_MAX_TOKENS"
	// EnvThinkingBudget turns on Anthropic extended thinking with a budget.
	EnvThinkingBudget = "WEFT_MODEL_THINKING_BUDGET"
	// EnvOpenAIKey is OpenAI's key variable.
	EnvOpenAIKey = "OPENAI_API_KEY"
	// EnvAnthropicKey is Anthropic's key variable.
	EnvAnthropicKey = "ANTHROPIC_API_KEY"
)

// The providers a spec can name.
const (
	// OpenAI names the OpenAI adapter (model/openai, its Provider), also
	// used for OpenAI-compatible servers through a base URL.
	OpenAI = "openai"
	// Anthropic names the Anthropic adapter (model/anthropic, its
	// Provider).
	Anthropic = "anthropic"
)

// ErrNotBuiltIn is returned by Open in a binary built with the tag nosdk,
// which leaves the model SDKs out.
var ErrNotBuiltIn = errors.New("provider: this binary was built with -tags nosdk, without the model SDKs")

// SDKs reports whether this binary has the model SDKs (it was not built
// with the tag nosdk).
func SDKs() bool { return sdks }

// ErrNotConfigured is returned by FromEnv when WEFT_MODEL is unset.
var ErrNotConfigured = errors.New("provider: no model configured (set " + EnvModel + ")")

// Spec names a provider and one of its models.
type Spec struct {
	// Provider is OpenAI or Anthropic.
	Provider string
	// Model is the provider's model name, such as "gpt-4.1".
	Model string
}

// String returns "provider:model".
func (s Spec) String() string { return s.Provider + ":" + s.Model }

// ParseSpec parses "openai:<model>" or "anthropic:<model>".
func ParseSpec(s string) (Spec, error) {
	p, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || m == "" {
		return Spec{}, fmt.Errorf("provider: model spec %q: want openai:<model> or anthropic:<model>", s)
	}
	switch p {
	case OpenAI, Anthropic:
		return Spec{Provider: p, Model: m}, nil
	}
	return Spec{}, fmt.Errorf("provider: model spec %q: unknown provider %q (want %s or %s)", s, p, OpenAI, Anthropic)
}

// Options configure Open. Zero values mean the provider's defaults.
type Options struct {
	// APIKey is the provider's API key; empty means the provider's key
	// variable (OPENAI_API_KEY or ANTHROPIC_API_KEY).
	APIKey string
	// BaseURL points the adapter at another server; empty means the
	// provider's API.
	BaseURL string
	// MaxTokens limits a turn's output tokens; zero means the adapter's
	// default (OpenAI: the server's; Anthropic: anthropic.DefaultMaxTokens).
	MaxTokens int64
	// ThinkingBudget turns on Anthropic extended thinking; it is an error
	// for OpenAI.
	ThinkingBudget int64
	// HTTPClient is the HTTP client the SDK uses; nil means its default.
	HTTPClient *http.Client
}

// Open returns the adapter spec names, configured by opts. It reads the
// environment only for the provider's key variable when opts.APIKey is
// empty.
func Open(spec string, opts Options) (model.Model, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if opts.MaxTokens < 0 || opts.ThinkingBudget < 0 {
		return nil, fmt.Errorf("provider: max tokens and thinking budget must not be negative")
	}
	if s.Provider == OpenAI && opts.ThinkingBudget > 0 {
		return nil, fmt.Errorf("provider: %s: a thinking budget applies to %s models only", s, Anthropic)
	}
	return open(s, opts)
}

// Config is a model configuration taken from flags or the environment.
type Config struct {
	// Spec is "openai:<model>" or "anthropic:<model>"; empty means no model
	// is configured.
	Spec string
	Options
}

// ConfigFromEnv reads WEFT_MODEL, WEFT_MODEL_BASE_URL, WEFT_MODEL_API_KEY,
// WEFT_MODEL_MAX_TOKENS and WEFT_MODEL_THINKING_BUDGET through getenv (nil
// means os.Getenv). It fails only on a malformed number.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{Spec: strings.TrimSpace(getenv(EnvModel))}
	c.BaseURL = strings.TrimSpace(getenv(EnvBaseURL))
	c.APIKey = getenv(EnvAPIKey)
	for _, v := range []struct {
		name string
		dst  *int64
	}{{EnvMaxTokens, &c.MaxTokens}, {EnvThinkingBudget, &c.ThinkingBudget}} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("provider: %s=%q: want a non-negative integer", v.name, s)
		}
		*v.dst = n
	}
	return c, nil
}

// RegisterFlags defines -model, -model-base-url and -model-max-tokens on fs,
// with c's current values (typically from ConfigFromEnv) as defaults, so a
// flag overrides the environment.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Spec, "model", c.Spec, "model to use, openai:<model> or anthropic:<model> (env "+EnvModel+"; empty: the scripted model)")
	fs.StringVar(&c.BaseURL, "model-base-url", c.BaseURL, "base URL of an OpenAI- or Anthropic-compatible server (env "+EnvBaseURL+")")
	fs.Int64Var(&c.MaxTokens, "model-max-tokens", c.MaxTokens, "output token limit of a model turn, 0 for the default (env "+EnvMaxTokens+")")
}

// Configured reports whether a model spec is set.
func (c Config) Configured() bool { return c.Spec != "" }

// Open opens the configured model; ErrNotConfigured when no spec is set.
func (c Config) Open() (model.Model, error) {
	if !c.Configured() {
		return nil, ErrNotConfigured
	}
	return Open(c.Spec, c.Options)
}

// FromEnv opens the model the environment configures; ErrNotConfigured
// (errors.Is) when WEFT_MODEL is unset.
func FromEnv() (model.Model, error) {
	c, err := ConfigFromEnv(nil)
	if err != nil {
		return nil, err
	}
	return c.Open()
}

// Describe says which model m is, for `weft dev` and logs: the adapter's
// own description (provider, model, server) when it has one, else its Name.
func Describe(m model.Model) string {
	if d, ok := m.(interface{ Describe() string }); ok {
		return d.Describe()
	}
	return m.Name()
}
