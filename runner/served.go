package runner

import (
	"fmt"
	"slices"
	"strings"
)

// served lists the agents this runner serves as name@version, sorted.
func (r *Runner) served() []string {
	var out []string
	for _, a := range r.list {
		ref := a.Ref()
		out = append(out, ref.Name+"@"+ref.Version)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unknownAgent is the message of start's unknown_agent: what was asked for
// and what this runner serves, so that a typo is fixed without reading the
// runner's configuration.
func (r *Runner) unknownAgent(name, version string) string {
	what := fmt.Sprintf("agent %q", name)
	if version != "" {
		what += fmt.Sprintf(" version %q", version)
	}
	return fmt.Sprintf("no runner serves %s; this runner serves %s", what, strings.Join(r.served(), ", "))
}
