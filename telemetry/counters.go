package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// InternalRefusals is the name of the OpenTelemetry counter of internal
// refusals: decisions the runtime derived itself (a takeover, a timer, a
// resolution of a tool request, a model's answer) that the decision core
// refused. Each one is a bug (docs/semantics.md §8, "A run can always be
// answered"); its attributes are weft.command (the command's name) and
// weft.code (the refusal's protocol error code).
const InternalRefusals = "weft.runner.internal_refusals"

// InternalRefusal counts one internal refusal of command with code in
// the InternalRefusals counter of the global meter provider (a no-op
// unless an application installs one). The caller logs it with the run.
func (t *Telemetry) InternalRefusal(ctx context.Context, command, code string) {
	c, err := otel.Meter("github.com/weftrun/weft").Int64Counter(InternalRefusals,
		metric.WithDescription("decisions the runtime derived itself that the decision core refused"))
	if err != nil {
		t.log.Error("telemetry: counter", "name", InternalRefusals, "err", err)
		return
	}
	c.Add(ctx, 1, metric.WithAttributes(attribute.String("weft.command", command), attribute.String("weft.code", code)))
}
