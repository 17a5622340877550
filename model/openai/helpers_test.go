package openai_test

import (
	"errors"

	"github.com/weftrun/weft/model"
)

func asModelError(err error, target **model.Error) bool { return errors.As(err, target) }
