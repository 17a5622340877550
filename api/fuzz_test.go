package api

import (
	"context"
	"errors"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/fuzzseed"
)

// acceptAll is a Backend that accepts every command and remembers the
// last one, so that a fuzz target can check what the decoding let
// through.
type acceptAll struct{ got any }

func (b *acceptAll) Start(_ context.Context, r StartRequest) (StartReply, error) {
	b.got = r
	return StartReply{}, nil
}
func (b *acceptAll) Approve(_ context.Context, r ApproveRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Reject(_ context.Context, r RejectRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Reconcile(_ context.Context, r ReconcileRequest, _ bool) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Settle(_ context.Context, r Settlement) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Cancel(_ context.Context, r CancelRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Pause(_ context.Context, r PauseRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Resume(_ context.Context, r ResumeRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Restart(_ context.Context, r RestartRequest) (StartReply, error) {
	b.got = r
	return StartReply{}, nil
}
func (b *acceptAll) Report(_ context.Context, r Report) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Resolve(_ context.Context, r ResolveRequest) (Reply, error) {
	b.got = r
	return Reply{}, nil
}
func (b *acceptAll) Decide(_ context.Context, r DecideRun) (DecideRunReply, error) {
	b.got = r
	return DecideRunReply{}, nil
}

// decodeCommand runs body through endpoint's decoding and checks (what
// the handler Serve installs does, without NATS and idempotency), returning what reached the
// backend, or the refusal.
func decodeCommand(endpoint string, body []byte) (any, error) {
	if err := precheck(body); err != nil {
		return nil, err
	}
	b := &acceptAll{}
	s := &service{b: b}
	ctx := context.Background()
	var err error
	switch endpoint {
	case EndpointStart:
		_, _, err = s.start(ctx, body)
	case EndpointApprove:
		_, _, err = s.approve(ctx, body)
	case EndpointReject:
		_, _, err = s.reject(ctx, body)
	case EndpointReconcile:
		_, _, err = s.reconcile(ctx, body, false)
	case EndpointReconcileStored:
		_, _, err = s.reconcile(ctx, body, true)
	case EndpointResolve:
		_, _, err = s.resolve(ctx, body)
	case EndpointCancel:
		_, _, err = s.cancel(ctx, body)
	case EndpointPause:
		_, _, err = s.pause(ctx, body)
	case EndpointResume:
		_, _, err = s.resume(ctx, body)
	case EndpointSettle:
		_, _, err = s.settle(ctx, &Queue{Agent: "a", Version: "1", Tool: "t"}, body)
	case EndpointReport:
		_, _, err = s.report(ctx, &Queue{Agent: "a", Version: "1", Tool: "t"}, body)
	default:
		return nil, nil
	}
	return b.got, err
}

// checkDecoded is what every fuzz target of the command API asserts: a
// refusal is a *weft.Error whose code the endpoint declares (api.Refusals,
// docs/protocol.md's error table) and nothing reached the backend; an
// accepted command names a run of the run id grammar, has every field
// within its limit (docs/protocol/40-commands.md, Limits) and, for an
// answer, a revision.
func checkDecoded(t *testing.T, endpoint string, got any, err error) {
	t.Helper()
	if err != nil {
		var we *weft.Error
		if !errors.As(err, &we) {
			t.Fatalf("%s: refusal %v is no *weft.Error", endpoint, err)
		}
		declared := false
		for _, c := range Refusals()[endpoint] {
			declared = declared || c == we.Code
		}
		if !declared {
			t.Fatalf("%s: refused %s, which api.Refusals does not declare for it", endpoint, we.Code)
		}
		if got != nil {
			t.Fatalf("%s: refused %s but the backend got %+v", endpoint, we.Code, got)
		}
		return
	}
	within := func(fs ...field) {
		t.Helper()
		if err := bounded(fs...); err != nil {
			t.Fatalf("%s: accepted with %v", endpoint, err)
		}
	}
	runOK := func(run string) {
		t.Helper()
		if !validRun(run) {
			t.Fatalf("%s: accepted run id %q", endpoint, run)
		}
	}
	switch r := got.(type) {
	case StartRequest:
		within(field{"input", r.Input, MaxInput}, field{"correlation", r.Correlation, MaxID})
		if r.Run != "" {
			runOK(r.Run)
		}
		if !validToken(r.Agent, false) {
			t.Fatalf("start: accepted agent %q", r.Agent)
		}
	case ApproveRequest:
		runOK(r.Run)
		within(field{"action", r.Action, MaxID}, field{"approver", r.Approver, MaxID}, field{"credential", r.Credential, MaxCredential})
		if r.Revision < 1 || r.Action == "" {
			t.Fatalf("approve: accepted revision %d, action %q", r.Revision, r.Action)
		}
	case RejectRequest:
		runOK(r.Run)
		within(field{"action", r.Action, MaxID}, field{"credential", r.Credential, MaxCredential}, field{"reason", r.Reason, MaxReason})
		if r.Revision < 1 || r.Action == "" {
			t.Fatalf("reject: accepted revision %d, action %q", r.Revision, r.Action)
		}
	case ReconcileRequest:
		runOK(r.Run)
		within(field{"action", r.Action, MaxID}, field{"by", r.By, MaxID})
		if len(r.Content) == 0 {
			t.Fatalf("%s: accepted without content", endpoint)
		}
	case ResolveRequest:
		runOK(r.Run)
		within(field{"action", r.Action, MaxID}, field{"by", r.By, MaxID})
	case CancelRequest:
		runOK(r.Run)
		within(field{"reason", r.Reason, MaxReason}, field{"by", r.By, MaxID})
	case PauseRequest:
		runOK(r.Run)
		within(field{"reason", r.Reason, MaxReason}, field{"by", r.By, MaxID})
	case ResumeRequest:
		runOK(r.Run)
		within(field{"reason", r.Reason, MaxReason}, field{"by", r.By, MaxID})
	case Settlement:
		runOK(r.Run)
		within(field{"message", r.Message, MaxText}, field{"evidence", r.Evidence, MaxText}, field{"summary", r.Summary, MaxReason})
		if r.Queue == nil || r.Action == "" || r.Outcome == "" {
			t.Fatalf("settle: accepted %+v", r)
		}
	case Report:
		runOK(r.Run)
		within(field{"message", r.Message, MaxText}, field{"evidence", r.Evidence, MaxText}, field{"worker", r.Worker, MaxID})
		if r.Queue == nil || r.Action == "" || r.Outcome == "" {
			t.Fatalf("report: accepted %+v", r)
		}
	default:
		t.Fatalf("%s: accepted, but the backend got %T", endpoint, got)
	}
}

// FuzzCommands fuzzes the decoding and checking of every command body
// (docs/protocol/40-commands.md): whatever the bytes, the
// API never panics, refuses only with codes the endpoint declares, and
// passes on only requests within the protocol's grammar and limits. The
// seed corpus (testdata/fuzz/FuzzCommands) holds a valid body of every
// endpoint and malformed ones.
func FuzzCommands(f *testing.F) {
	f.Fuzz(func(t *testing.T, endpoint string, body []byte) {
		if _, ok := Refusals()[endpoint]; !ok || endpoint == EndpointSettle || endpoint == EndpointReport {
			return // FuzzSettlement and FuzzReport
		}
		got, err := decodeCommand(endpoint, body)
		checkDecoded(t, endpoint, got, err)
	})
}

// FuzzReport fuzzes a tool worker's report body (docs/protocol/41-tasks.md,
// "The report") as FuzzCommands does the commands.
func FuzzReport(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeCommand(EndpointReport, body)
		checkDecoded(t, EndpointReport, got, err)
	})
}

// FuzzSettlement fuzzes a settlement body (docs/protocol/40-commands.md,
// weft.api.settle) as FuzzCommands does the commands.
func FuzzSettlement(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeCommand(EndpointSettle, body)
		checkDecoded(t, EndpointSettle, got, err)
	})
}

// TestFuzzSeedsAreMeaningful keeps the command API's seed corpora
// meaningful: every seed named valid-* is accepted, every
// other seed refused, so that plain go test runs both sides of every
// decoder.
func TestFuzzSeedsAreMeaningful(t *testing.T) {
	for _, target := range []string{"FuzzCommands", "FuzzReport", "FuzzSettlement"} {
		seeds, err := fuzzseed.Read(".", target)
		if err != nil {
			t.Fatal(err)
		}
		valid := 0
		for _, s := range seeds {
			endpoint, body := EndpointReport, []byte(s.Values[0])
			switch target {
			case "FuzzCommands":
				endpoint, body = s.Values[0], []byte(s.Values[1])
			case "FuzzSettlement":
				endpoint = EndpointSettle
			}
			_, err := decodeCommand(endpoint, body)
			if s.Valid() {
				valid++
			}
			if s.Valid() != (err == nil) {
				t.Errorf("%s/%s: refusal %v; a seed is accepted exactly when it is named valid-*", target, s.Name, err)
			}
		}
		if valid == 0 || valid == len(seeds) {
			t.Errorf("%s: %d valid seeds of %d; want both valid and malformed ones", target, valid, len(seeds))
		}
	}
}
