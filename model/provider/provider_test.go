package provider_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic/anthropictest"
	"github.com/weftrun/weft/model/openai/openaitest"
	"github.com/weftrun/weft/model/provider"
)

func TestParseSpec(t *testing.T) {
	good := map[string]provider.Spec{
		"openai:gpt-4.1":              {Provider: "openai", Model: "gpt-4.1"},
		" anthropic:claude-sonnet ":   {Provider: "anthropic", Model: "claude-sonnet"},
		"openai:llama3.1:8b":          {Provider: "openai", Model: "llama3.1:8b"},
		"openai:qwen/qwen3-coder:30b": {Provider: "openai", Model: "qwen/qwen3-coder:30b"},
	}
	for in, want := range map[string]provider.Spec(good) {
		got, err := provider.ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "gpt-4.1", "openai:", "gemini:pro", ":x"} {
		if _, err := provider.ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	c, err := provider.ConfigFromEnv(env(map[string]string{
		provider.EnvModel: "anthropic:claude-x", provider.EnvBaseURL: "http://gw", provider.EnvAPIKey: "k",
		provider.EnvMaxTokens: "2048", provider.EnvThinkingBudget: "1024",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Config{Spec: "anthropic:claude-x", Options: provider.Options{BaseURL: "http://gw", APIKey: "k", MaxTokens: 2048, ThinkingBudget: 1024}}
	if c != want {
		t.Errorf("config = %+v, want %+v", c, want)
	}
	if _, err := provider.ConfigFromEnv(env(map[string]string{provider.EnvMaxTokens: "many"})); err == nil {
		t.Errorf("malformed max tokens accepted")
	}
	c, err = provider.ConfigFromEnv(env(nil))
	if err != nil || c.Configured() {
		t.Errorf("empty env = %+v, %v", c, err)
	}
	if _, err := c.Open(); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("Open without a spec = %v, want ErrNotConfigured", err)
	}
}

func TestFromEnvNotConfigured(t *testing.T) {
	t.Setenv(provider.EnvModel, "")
	if _, err := provider.FromEnv(); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("FromEnv = %v, want ErrNotConfigured", err)
	}
}

func TestFlagsOverrideEnv(t *testing.T) {
	c, _ := provider.ConfigFromEnv(env(map[string]string{provider.EnvModel: "openai:a", provider.EnvBaseURL: "http://env"}))
	fs := flag.NewFlagSet("weft", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-model", "anthropic:b", "-model-max-tokens", "99"}); err != nil {
		t.Fatal(err)
	}
	if c.Spec != "anthropic:b" || c.BaseURL != "http://env" || c.MaxTokens != 99 {
		t.Errorf("config = %+v", c)
	}
}

func request() model.Request {
	return model.Request{Run: "r", Turn: 1, Transcript: []model.Message{{Role: model.RoleUser, Text: "hi"}}}
}

func TestFromEnvOpenAI(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text("hello"))
	t.Setenv(provider.EnvModel, "openai:llama3.1:8b")
	t.Setenv(provider.EnvBaseURL, srv.BaseURL())
	t.Setenv(provider.EnvAPIKey, "")
	t.Setenv(provider.EnvMaxTokens, "")
	t.Setenv(provider.EnvThinkingBudget, "")
	t.Setenv(provider.EnvOpenAIKey, "env-openai-key")
	m, err := provider.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "openai:llama3.1:8b" || !strings.Contains(provider.Describe(m), srv.BaseURL()) {
		t.Errorf("Name = %q, Describe = %q", m.Name(), provider.Describe(m))
	}
	r, err := m.Complete(context.Background(), request())
	if err != nil || r.Turn.Text != "hello" {
		t.Fatalf("Complete = %+v, %v", r, err)
	}
	req := srv.Requests()[0]
	if got := req.Header.Get("Authorization"); got != "Bearer env-openai-key" {
		t.Errorf("Authorization = %q", got)
	}
	c, _ := openaitest.Decode(req)
	if c.Model != "llama3.1:8b" {
		t.Errorf("model = %q", c.Model)
	}
}

func TestOpenAnthropic(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	srv.Enqueue(anthropictest.Text("hello"))
	m, err := provider.Open("anthropic:claude-x", provider.Options{APIKey: "opt-key", BaseURL: srv.BaseURL(), MaxTokens: 2048, ThinkingBudget: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "anthropic:claude-x" || !strings.Contains(provider.Describe(m), "anthropic:claude-x") {
		t.Errorf("Name = %q, Describe = %q", m.Name(), provider.Describe(m))
	}
	if _, err := m.Complete(context.Background(), request()); err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[0]
	if !strings.Contains(req.Header.Get("Authorization")+req.Header.Get("X-Api-Key"), "opt-key") {
		t.Errorf("key not sent: %v", req.Header)
	}
	body, _ := anthropictest.Decode(req)
	if body.MaxTokens != 2048 || !strings.Contains(string(body.Thinking), `"budget_tokens":1024`) {
		t.Errorf("max_tokens = %d, thinking = %s", body.MaxTokens, body.Thinking)
	}
}

func TestOpenRejects(t *testing.T) {
	if _, err := provider.Open("openai:gpt", provider.Options{ThinkingBudget: 10}); err == nil {
		t.Errorf("thinking budget accepted for openai")
	}
	if _, err := provider.Open("nope", provider.Options{}); err == nil {
		t.Errorf("bad spec accepted")
	}
}

type plain struct{}

func (plain) Name() string { return "scripted" }
func (plain) Complete(context.Context, model.Request) (model.Reply, error) {
	return model.Reply{}, nil
}

func TestDescribeFallsBackToName(t *testing.T) {
	if got := provider.Describe(plain{}); got != "scripted" {
		t.Errorf("Describe = %q", got)
	}
}

// TestOpenAIWithoutKey: a local OpenAI-compatible server (Ollama, LM
// Studio) needs no key.
func TestOpenAIWithoutKey(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text("hello"))
	t.Setenv(provider.EnvOpenAIKey, "")
	os.Unsetenv(provider.EnvOpenAIKey)
	m, err := provider.Open("openai:llama3", provider.Options{BaseURL: srv.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), request()); err != nil {
		t.Fatalf("Complete without a key: %v", err)
	}
	t.Logf("Authorization sent: %q", srv.Requests()[0].Header.Get("Authorization"))
}
