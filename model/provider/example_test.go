package provider_test

import (
	"fmt"

	"github.com/weftrun/weft/model/provider"
)

// ExampleOpen points the OpenAI adapter at a local Ollama server; nothing
// is sent until the first turn.
func ExampleOpen() {
	m, err := provider.Open("openai:llama3.1:8b", provider.Options{BaseURL: "http://localhost:11434/v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(provider.Describe(m))
	// Output: openai:llama3.1:8b (Chat Completions at http://localhost:11434/v1)
}
