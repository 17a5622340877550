package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
)

// request sends body to subject and returns the *weft.Error of an error
// reply (api.ReplyError, the one error envelope), or a transport error. A
// reply it cannot read is internal, which deliver sends again and
// SettleError answers settle_unconfirmed: it is not an answer.
func request(ctx context.Context, nc *nats.Conn, subject string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	m, err := nc.RequestWithContext(ctx, subject, b)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Retrying cannot help: say so, as the runner would.
		return &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("request of %d bytes on %s is over the NATS server's max_payload of %d bytes (weft needs at least 8 MiB: docs/protocol/10-log.md)", len(b), subject, nc.MaxPayload())}
	}
	if err != nil {
		return fmt.Errorf("worker: request %s: %w", subject, err)
	}
	if e := api.ReplyError(m); e != nil {
		return e
	}
	return nil
}
