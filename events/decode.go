package events

import (
	"encoding/json"
	"fmt"
)

// ErrUnknownEvent is wrapped by Decode for a name or schema version this
// build does not know.
var ErrUnknownEvent = fmt.Errorf("unknown event")

// Decode decodes the payload of an event named name at schema version
// schema. It is the one switch over the closed set.
func Decode(name Name, schema int, payload json.RawMessage) (Event, error) {
	if schema != 1 {
		return nil, fmt.Errorf("%w: %s schema %d", ErrUnknownEvent, name, schema)
	}
	switch name {
	case NameRunStarted:
		return decode[RunStarted](payload)
	case NameModelRequested:
		return decode[ModelRequested](payload)
	case NameModelReplied:
		return decode[ModelReplied](payload)
	case NameModelFailed:
		return decode[ModelFailed](payload)
	case NameAnswerRejected:
		return decode[AnswerRejected](payload)
	case NameCallValidated:
		return decode[CallValidated](payload)
	case NamePolicyDecided:
		return decode[PolicyDecided](payload)
	case NameApprovalRequested:
		return decode[ApprovalRequested](payload)
	case NameApprovalAnswered:
		return decode[ApprovalAnswered](payload)
	case NameRequirementChanged:
		return decode[RequirementChanged](payload)
	case NameActionQueued:
		return decode[ActionQueued](payload)
	case NameAttemptFenced:
		return decode[AttemptFenced](payload)
	case NameAttemptReported:
		return decode[AttemptReported](payload)
	case NameAttemptLost:
		return decode[AttemptLost](payload)
	case NameAttemptClosed:
		return decode[AttemptClosed](payload)
	case NameAttemptNotStarted:
		return decode[AttemptNotStarted](payload)
	case NameReportRefused:
		return decode[ReportRefused](payload)
	case NameActionUncertain:
		return decode[ActionUncertain](payload)
	case NameSettlementAccepted:
		return decode[SettlementAccepted](payload)
	case NameSettlementRefused:
		return decode[SettlementRefused](payload)
	case NameReconciled:
		return decode[Reconciled](payload)
	case NameActionsNotStarted:
		return decode[ActionsNotStarted](payload)
	case NameCancelRequested:
		return decode[CancelRequested](payload)
	case NameRunHandedOff:
		return decode[RunHandedOff](payload)
	case NameRunRecovered:
		return decode[RunRecovered](payload)
	case NameRunFinished:
		return decode[RunFinished](payload)
	case NameChildStarted:
		return decode[ChildStarted](payload)
	case NameChildSettled:
		return decode[ChildSettled](payload)
	case NameResolved:
		return decode[Resolved](payload)
	case NameHeadSigned:
		return decode[HeadSigned](payload)
	case NameRunPaused:
		return decode[RunPaused](payload)
	case NameRunResumed:
		return decode[RunResumed](payload)
	case NameRunForked:
		return decode[RunForked](payload)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownEvent, name)
}

func decode[E Event](payload json.RawMessage) (Event, error) {
	var e E
	if err := json.Unmarshal(payload, &e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", e.EventName(), err)
	}
	return e, nil
}
