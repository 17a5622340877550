package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// EndpointDecide answers several approval requests, of one run or many, in
// one request: a batch decision (docs/protocol/40-commands.md).
const EndpointDecide = "decide"

// MaxBatchItems is the most items a batch decision may hold; more is
// refused payload_too_large before anything is looked up.
const MaxBatchItems = 100

// The outcomes of an item of a batch decision.
const (
	// OutcomeAnswered says the answer is recorded (with the run's other
	// items, in one decision).
	OutcomeAnswered = "answered"
	// OutcomeRefused says the item was refused (DecideOutcome.Error says
	// why); nothing of its run's items is recorded.
	OutcomeRefused = "refused"
	// OutcomeNotRecorded says the item was valid but another item of the
	// same run was refused (DecideOutcome.Because names them), so none of
	// that run's items is recorded.
	OutcomeNotRecorded = "not_recorded"
)

// DecideRequest is a batch decision (weft.api.decide): approval answers of
// one run or many. BatchID makes it idempotent, per run: the reply of each
// run's part is kept for the batch id and the part's items (partDigest) as
// a command's is for its command id (a repeated batch answers the same, a
// part refused for a retry — runner_busy, unavailable, … — is decided
// again, and the same batch id with other items for a run is decided as
// those items).
type DecideRequest struct {
	Schema  int          `json:"schema"`
	BatchID string       `json:"batch_id,omitempty"`
	Items   []DecideItem `json:"items"`
}

// DecideItem is one answer of a batch: Answer is "approve" or "reject",
// the other fields those of an ApproveRequest or a RejectRequest (Approve
// and Reject convert it), checked as that endpoint checks them.
type DecideItem struct {
	Run        string                `json:"run"`
	Action     string                `json:"action"`
	Revision   int                   `json:"revision"`
	Answer     string                `json:"answer"`
	Approver   string                `json:"approver,omitempty"`
	Credential string                `json:"credential,omitempty"`
	Reason     string                `json:"reason,omitempty"`
	By         string                `json:"by,omitempty"`
	Proof      *events.ApprovalProof `json:"proof,omitempty"`
	// Arguments are an approve's edited arguments (ApproveRequest.Arguments);
	// a reject takes none.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Approve is the item as an approve request (no command id: the batch's
// run part is the command).
func (it DecideItem) Approve() ApproveRequest {
	return ApproveRequest{Schema: Schema, Run: it.Run, Action: it.Action, Revision: it.Revision, Approver: it.Approver, Credential: it.Credential, Proof: it.Proof, Arguments: it.Arguments}
}

// Reject is the item as a reject request.
func (it DecideItem) Reject() RejectRequest {
	return RejectRequest{Schema: Schema, Run: it.Run, Action: it.Action, Revision: it.Revision, Reason: it.Reason, Approver: it.Approver, Credential: it.Credential, By: it.By, Proof: it.Proof}
}

// DecideRun is one run's part of a batch decision, as the service hands it
// to the Backend (and a runner forwards it to the run's driver): the
// run's items, in the batch's order.
type DecideRun struct {
	Run     string       `json:"run"`
	BatchID string       `json:"batch_id,omitempty"`
	Items   []DecideItem `json:"items"`
}

// DecideRunReply answers a DecideRun: an outcome per item, in its order.
type DecideRunReply struct {
	Schema int             `json:"schema"`
	Run    string          `json:"run"`
	Items  []DecideOutcome `json:"items"`
}

// DecideOutcome is the outcome of one item of a batch decision.
type DecideOutcome struct {
	Run      string `json:"run"`
	Action   string `json:"action"`
	Revision int    `json:"revision"`
	Answer   string `json:"answer"`
	// Outcome is OutcomeAnswered, OutcomeRefused or OutcomeNotRecorded.
	Outcome string `json:"outcome"`
	// Status is the run's status after its part was decided (answered).
	Status string `json:"status,omitempty"`
	// Error is the item's refusal (refused).
	Error *weft.Error `json:"error,omitempty"`
	// Because names the refused actions of the same run (not_recorded).
	Because []string `json:"because,omitempty"`
}

// DecideReply answers a batch decision: an outcome per item, in the
// request's order.
type DecideReply struct {
	Schema  int             `json:"schema"`
	BatchID string          `json:"batch_id,omitempty"`
	Items   []DecideOutcome `json:"items"`
}

// Outcomes is the outcome of each of one run's items: with no refusal
// every item is answered (status the run's status after); otherwise
// refusals[i] is item i's own refusal, and an item without one is
// not_recorded because of the refused ones.
func Outcomes(items []DecideItem, refusals []error, status string) []DecideOutcome {
	var refused []string
	for i, err := range refusals {
		if err != nil {
			refused = append(refused, items[i].Action)
		}
	}
	out := make([]DecideOutcome, len(items))
	for i, it := range items {
		o := DecideOutcome{Run: it.Run, Action: it.Action, Revision: it.Revision, Answer: it.Answer, Outcome: OutcomeAnswered, Status: status}
		switch {
		case i < len(refusals) && refusals[i] != nil:
			o.Outcome, o.Status, o.Error = OutcomeRefused, "", coded(refusals[i])
		case len(refused) > 0:
			o.Outcome, o.Status, o.Because = OutcomeNotRecorded, "", refused
		}
		out[i] = o
	}
	return out
}

// coded is err as a protocol error (uncoded's answer for one without a
// code).
func coded(err error) *weft.Error {
	var we *weft.Error
	if errors.As(err, &we) {
		return we
	}
	return uncoded(err)
}

// checkDecide checks a batch before anything is looked up: its size, each
// item as its endpoint checks it, and no request named twice.
func checkDecide(req DecideRequest) error {
	if err := bounded(field{"batch_id", req.BatchID, MaxID}); err != nil {
		return err
	}
	if len(req.Items) == 0 {
		return &weft.Error{Code: weft.CodeInvalidRequest, Message: "items is required (1 to " + fmt.Sprint(MaxBatchItems) + " answers)"}
	}
	if len(req.Items) > MaxBatchItems {
		return &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("items: %d answers is over the limit of %d per batch", len(req.Items), MaxBatchItems)}
	}
	seen := make(map[[2]string]int, len(req.Items))
	for i, it := range req.Items {
		var err error
		switch it.Answer {
		case events.AnswerApprove:
			err = checkApprove(it.Approve())
		case events.AnswerReject:
			err = checkReject(it.Reject())
			if err == nil && EditedArguments(it.Arguments) != nil {
				err = &weft.Error{Code: weft.CodeInvalidRequest, Message: "arguments: a reject takes no edited arguments"}
			}
		default:
			err = &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("answer %q: approve or reject", it.Answer)}
		}
		if err != nil {
			we := *coded(err)
			we.Message = fmt.Sprintf("items[%d]: %s", i, we.Message)
			return &we
		}
		k := [2]string{it.Run, it.Action}
		if j, ok := seen[k]; ok {
			return &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("items[%d] answers run %s action %s again (items[%d]): one answer per request", i, it.Run, it.Action, j)}
		}
		seen[k] = i
	}
	return nil
}

// definite reports whether a run part's reply is kept for its batch id:
// not when an item was refused for a retry (an approver that did not
// answer: unavailable, …), so that the same batch id decides it again.
func definite(rep DecideRunReply) bool {
	for _, o := range rep.Items {
		if o.Error != nil && !keep(o.Error.Code) {
			return false
		}
	}
	return true
}

// partDigest is a digest of a run part's items, all that decides them but
// the credential (never kept, not even hashed): the kept reply is found
// by the batch id and this, so that a batch id reused with other items
// (another action, answer, revision, reason, …) is decided as what it is,
// never answered with the outcomes of the items kept before.
func partDigest(items []DecideItem) string {
	h := sha256.New()
	for _, it := range items {
		it.Credential = ""
		b, _ := json.Marshal(it)
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// partSubject is the namespace of a batch part's kept reply: never the
// subject a command's is kept under (handle keys every request on
// weft.api.decide by its top-level command_id and run, which a batch part
// must not share).
const partSubject = SubjectPrefix + EndpointDecide + "#part"

// decideLanes is how many runs' parts of one batch are decided at once.
const decideLanes = 8

// decide serves weft.api.decide: the items are grouped by run (in the
// order runs first appear), each run's part decided by the Backend as one
// decision and kept for the batch id like a command for its command id
// (once, keyed by the run and the batch id), and the outcomes returned in
// the request's order. A part refused as a whole (runner_busy, unknown_run,
// outcome_unknown, …) refuses each of its items with that error.
func (s *service) decide(ctx context.Context, b []byte) (any, string, error) {
	req, err := decode(b, func(r *DecideRequest) int { return r.Schema })
	if err != nil {
		return nil, "", err
	}
	if err := checkDecide(req); err != nil {
		return nil, "", err
	}
	var runs []string
	parts := map[string][]int{}
	for i, it := range req.Items {
		if _, ok := parts[it.Run]; !ok {
			runs = append(runs, it.Run)
		}
		parts[it.Run] = append(parts[it.Run], i)
	}
	out := DecideReply{Schema: Schema, BatchID: req.BatchID, Items: make([]DecideOutcome, len(req.Items))}
	var wg sync.WaitGroup
	lanes := make(chan struct{}, decideLanes)
	for _, run := range runs {
		idx := parts[run]
		part := DecideRun{Run: run, BatchID: req.BatchID}
		for _, i := range idx {
			part.Items = append(part.Items, req.Items[i])
		}
		wg.Add(1)
		lanes <- struct{}{}
		go func() {
			defer func() { <-lanes; wg.Done() }()
			key := ""
			if req.BatchID != "" {
				key = req.BatchID + "\x00" + partDigest(part.Items)
			}
			body, we := s.once(ctx, partSubject, run, key, func() (any, bool, error) {
				rep, err := s.b.Decide(ctx, part)
				return rep, definite(rep), err
			})
			var rep DecideRunReply
			if we == nil {
				if err := json.Unmarshal(body, &rep); err != nil {
					we = &weft.Error{Code: weft.CodeInternal, Message: "the reply kept for this batch id and run does not decode: " + err.Error()}
				}
			}
			if we == nil && len(rep.Items) != len(idx) {
				we = &weft.Error{Code: weft.CodeInternal, Message: fmt.Sprintf("the reply for this run's part has %d outcomes for %d items", len(rep.Items), len(idx))}
			}
			for k, i := range idx {
				if we != nil {
					it := req.Items[i]
					out.Items[i] = DecideOutcome{Run: it.Run, Action: it.Action, Revision: it.Revision, Answer: it.Answer, Outcome: OutcomeRefused, Error: we}
					continue
				}
				out.Items[i] = rep.Items[k]
			}
		}()
	}
	wg.Wait()
	return out, "", nil
}
