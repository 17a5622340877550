package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
)

// Client asks the catalog over NATS. It is safe for concurrent use.
type Client struct {
	nc *nats.Conn
}

// NewClient returns a Client over nc.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// Agent returns the catalog entry of the agent ref names (an empty Version:
// the one version served). No process serving the name is *weft.Error
// unknown_agent; no answer at all is unavailable.
func (c *Client) Agent(ctx context.Context, ref events.AgentRef) (Entry, error) {
	body, _ := json.Marshal(Request{Schema: Schema, Version: ref.Version})
	m, err := api.Request(ctx, c.nc, SubjectPrefix+ref.Name, body)
	if err != nil {
		var we *weft.Error
		if errors.As(err, &we) {
			return Entry{}, we
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return Entry{}, &weft.Error{Code: weft.CodeUnknownAgent, Message: "no process serves the catalog of agent " + ref.Name}
		}
		return Entry{}, &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("catalog %s: %v", ref.Name, err)}
	}
	if e := api.ReplyError(m); e != nil {
		return Entry{}, e
	}
	var e Entry
	if err := json.Unmarshal(m.Data, &e); err != nil {
		return Entry{}, fmt.Errorf("catalog %s: decode reply: %w", ref.Name, err)
	}
	return e, nil
}
