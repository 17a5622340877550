//go:build nosdk

package provider

import (
	"fmt"

	"github.com/weftrun/weft/model"
)

const sdks = false

// open refuses: this binary has no adapter SDKs.
func open(s Spec, _ Options) (model.Model, error) {
	return nil, fmt.Errorf("%w: %s needs them; run the same command without -tags nosdk (go run ./cmd/weft …, or go install ./cmd/weft): the first build then takes several minutes more", ErrNotBuiltIn, s)
}
