package projector

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// The query service's name, version and subject prefix.
const (
	// ServiceName is the micro service's name ("nats micro ls").
	ServiceName = "weft-query"
	// ServiceVersion is the micro service's version.
	ServiceVersion = "1.0.0"
	// QueryPrefix prefixes every endpoint's subject.
	QueryPrefix = "weft.api.query"
)

// The query endpoints; each listens on QueryPrefix + "." + name.
const (
	// EndpointRun answers a run's view.
	EndpointRun = "run"
	// EndpointList answers a page of runs.
	EndpointList = "list"
	// EndpointApprovals answers the approvals inbox.
	EndpointApprovals = "approvals"
	// EndpointUncertain answers the uncertain-effects inbox.
	EndpointUncertain = "uncertain"
	// EndpointHistory answers a page of a run's events.
	EndpointHistory = "history"
	// EndpointQuestions answers the open questions: actions reconciled as
	// unconfirmed that nobody has resolved yet.
	EndpointQuestions = "questions"
)

// Refusals returns, for every endpoint of the query service, the error
// codes it may answer: the "sent by" column of docs/protocol.md's error
// table, which a test keeps equal. The map and its slices are a fresh copy
// on every call: a caller that changes them changes nothing else.
func Refusals() map[string][]weft.Code {
	out := make(map[string][]weft.Code, len(refusals))
	for e, codes := range refusals {
		out[e] = slices.Clone(codes)
	}
	return out
}

// refusals is the table Refusals copies.
var refusals = map[string][]weft.Code{
	EndpointRun:       {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeInvalidName, weft.CodeUnknownRun, weft.CodeUnavailable},
	EndpointList:      {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeBadFilter, weft.CodeBadCursor, weft.CodeUnavailable},
	EndpointApprovals: {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeBadFilter, weft.CodeBadCursor, weft.CodeUnavailable},
	EndpointUncertain: {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeBadFilter, weft.CodeBadCursor, weft.CodeUnavailable},
	EndpointQuestions: {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeBadFilter, weft.CodeBadCursor, weft.CodeUnavailable},
	EndpointHistory:   {weft.CodeInvalidJSON, weft.CodeInvalidRequest, weft.CodePayloadTooLarge, weft.CodeInvalidName, weft.CodeUnknownRun, weft.CodeBadFilter, weft.CodeBadCursor, weft.CodeQuarantined, weft.CodeUnavailable},
}

// MaxQueryBody is the largest query request body accepted (bytes): 64
// KiB, far more than any query's fields need (run ids, filters, a
// cursor); a larger body is refused payload_too_large before it is
// decoded (docs/adr/0016).
const MaxQueryBody = 64 << 10

// The bounds of a history page.
const (
	// DefaultHistoryLimit is the page size when HistoryRequest.Limit is 0.
	DefaultHistoryLimit = 500
	// MaxHistoryLimit is the largest page size.
	MaxHistoryLimit = 5000
)

// RunRequest asks for one run's view.
type RunRequest struct {
	Schema int    `json:"schema,omitempty"`
	Run    string `json:"run"`
}

// RunReply carries a run's view and its family status (docs/semantics.md §6:
// status "computed for the run and its children"), computed when the query
// is answered from the views of the run and its child runs, never stored.
type RunReply struct {
	Schema int                 `json:"schema"`
	View   projections.RunView `json:"view"`
	// FamilyStatus is the run's status computed with its children's
	// (projections.FamilyStatus): the view's own status, or suspended
	// with the child runs it waits for when every open delegation's child
	// is suspended. For a run that never delegated it is the own status.
	FamilyStatus projections.Family `json:"family_status"`
	// ChildStatus gives each child run of View.Children, in the same
	// order, its status when the query was answered.
	ChildStatus []ChildStatus `json:"child_status,omitempty"`
	// Projected is the version of the run's stored view (weft_views) when
	// the query was answered; 0 when none is stored yet. Less than
	// View.Version while the projector is catching up: View is then the
	// stored view with the log's newer events folded onto it.
	Projected uint64 `json:"projected,omitempty"`
	// Forks lists the runs restarted from this one (a finished run),
	// oldest first (docs/semantics.md §14): read from the index the
	// projector keeps of each restarted run's forked_from, so a fork
	// started a moment ago may be missing until the projector has it.
	Forks []Fork `json:"forks,omitempty"`
}

// ChildStatus is the status of one child run when a run view query was
// answered.
type ChildStatus struct {
	// Run is the child run id.
	Run string `json:"run"`
	// Status is the child's own status; empty when the child run has no
	// events yet (its start is still being recorded).
	Status string `json:"status,omitempty"`
	// FamilyStatus is the child's status computed with its own children's;
	// absent when Status is.
	FamilyStatus *projections.Family `json:"family_status,omitempty"`
}

// MaxFamilyDepth bounds how deep the run query reads child runs (the
// deepest family a delegation limit allows); runs below it count as not
// known, so their parents keep their own status.
const MaxFamilyDepth = 16

// ListRequest filters and pages the run list.
type ListRequest struct {
	Schema int `json:"schema,omitempty"`
	projections.ListQuery
}

// InboxRequest asks for an inbox, optionally of one run or agent only, a
// page at a time: at most Limit items (0: DefaultInboxLimit), after the
// position Cursor names (the Next of the previous page).
type InboxRequest struct {
	Schema int    `json:"schema,omitempty"`
	Run    string `json:"run,omitempty"`
	Agent  string `json:"agent,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// The bounds of an inbox page (InboxRequest.Limit).
const (
	// DefaultInboxLimit is the page size when InboxRequest.Limit is 0.
	DefaultInboxLimit = 1000
	// MaxInboxLimit is the largest page size.
	MaxInboxLimit = 1000
)

// ApprovalsReply is the approvals inbox, oldest request first. Next is the
// cursor of the following page, empty on the last one.
type ApprovalsReply struct {
	Schema int                        `json:"schema"`
	Items  []projections.ApprovalItem `json:"items"`
	Next   string                     `json:"next,omitempty"`
}

// UncertainReply is the uncertain-effects inbox, oldest first, with ages
// computed when the query was answered.
type UncertainReply struct {
	Schema int                         `json:"schema"`
	Now    time.Time                   `json:"now"`
	Items  []projections.UncertainItem `json:"items"`
	Next   string                      `json:"next,omitempty"`
}

// QuestionsReply is the open-questions read model, oldest question first.
type QuestionsReply struct {
	Schema int                        `json:"schema"`
	Items  []projections.QuestionItem `json:"items"`
	Next   string                     `json:"next,omitempty"`
}

// HistoryRequest asks for a run's events after version After (0: from the
// start), at most Limit of them (default 500, at most 5000).
type HistoryRequest struct {
	Schema int    `json:"schema,omitempty"`
	Run    string `json:"run"`
	After  uint64 `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// HistoryReply is a page of a run's history. Next is the After of the next
// page, 0 on the last one. Head is the run's head when it was read.
type HistoryReply struct {
	Schema int               `json:"schema"`
	Run    string            `json:"run"`
	Events []events.Envelope `json:"events"`
	Head   eventlog.Head     `json:"head"`
	Next   uint64            `json:"next,omitempty"`
}

// Service answers queries. Create it with Serve; stop it with Stop. It
// holds no read model: every query reads what it answers from KV (the
// lists and inboxes through the order indexes of BucketIndex), so its
// memory does not grow with the runs.
type Service struct {
	svc    micro.Service
	log    *eventlog.Log
	views  jetstream.KeyValue
	state  jetstream.KeyValue
	ready  atomic.Bool // the index marker was seen at IndexVersion
	reader *indexReader
	reads  atomic.Uint64
	gets   atomic.Uint64
	now    func() time.Time
	logger *slog.Logger
	cancel context.CancelFunc
}

// Reads counts the KV entries the service read to answer lists and
// inboxes (index entries, directory nodes and inbox items) since it
// started: what a page costs.
func (s *Service) Reads() uint64 { return s.reads.Load() }

// ReadRequests counts the KV read requests (direct gets, or watches for
// a filter matching more keys than one direct get answers) behind Reads.
func (s *Service) ReadRequests() uint64 { return s.gets.Load() }

// ServeOption configures Serve.
type ServeOption func(*Service)

// WithClock makes the service compute uncertain ages with now (default
// time.Now).
func WithClock(now func() time.Time) ServeOption { return func(s *Service) { s.now = now } }

// WithServiceLogger logs through l.
func WithServiceLogger(l *slog.Logger) ServeOption { return func(s *Service) { s.logger = l } }

// Serve starts the query service on nc. It reads views from weft_views,
// falling back to folding the run's history from the log when a view is
// not projected yet, and pages the lists and inboxes from the order
// indexes (BucketIndex) with direct gets, so it follows every projector
// and keeps nothing in memory between queries.
func Serve(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *eventlog.Log, opts ...ServeOption) (*Service, error) {
	s := &Service{log: log, now: time.Now, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	var err error
	fail := func(err error) (*Service, error) {
		cancel()
		return nil, err
	}
	if s.views, err = js.KeyValue(ctx, BucketViews); err != nil {
		return fail(fmt.Errorf("projector: bucket %s: %w", BucketViews, err))
	}
	if s.state, err = js.KeyValue(ctx, BucketState); err != nil {
		return fail(fmt.Errorf("projector: bucket %s: %w", BucketState, err))
	}
	for _, b := range []string{BucketIndex, BucketApprovals, BucketUncertain, BucketQuestions} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			return fail(fmt.Errorf("projector: bucket %s: %w", b, err))
		}
	}
	s.reader = &indexReader{nc: nc, js: js, onRead: func(n int) { s.reads.Add(uint64(n)); s.gets.Add(1) }}
	s.svc, err = micro.AddService(nc, micro.Config{
		Name: ServiceName, Version: ServiceVersion,
		Description: "Weft queries: run views, run lists, inboxes and histories (docs/protocol/50-queries.md)",
	})
	if err != nil {
		return fail(fmt.Errorf("projector: add service: %w", err))
	}
	g := s.svc.AddGroup(QueryPrefix)
	for _, ep := range []struct {
		name string
		h    func(context.Context, []byte) (any, error)
	}{
		{EndpointRun, s.handleRun},
		{EndpointList, s.handleList},
		{EndpointApprovals, s.handleApprovals},
		{EndpointUncertain, s.handleUncertain},
		{EndpointHistory, s.handleHistory},
		{EndpointQuestions, s.handleQuestions},
	} {
		h := ep.h
		if err := g.AddEndpoint(ep.name, micro.HandlerFunc(func(req micro.Request) {
			rctx, cancel := context.WithTimeout(wctx, 10*time.Second)
			defer cancel()
			if n := len(req.Data()); n > MaxQueryBody {
				s.respondError(req, &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("body of %d bytes is over the %d byte limit of a query", n, MaxQueryBody)})
				return
			}
			reply, err := h(rctx, req.Data())
			if err != nil {
				s.respondError(req, err)
				return
			}
			if err := req.RespondJSON(reply); err != nil {
				s.logger.Warn("query reply failed", "endpoint", req.Subject(), "err", err)
			}
		})); err != nil {
			s.svc.Stop()
			return fail(fmt.Errorf("projector: add endpoint %s: %w", ep.name, err))
		}
	}
	return s, nil
}

// Stop stops the service and its watches.
func (s *Service) Stop() error {
	s.cancel()
	return s.svc.Stop()
}

func (s *Service) respondError(req micro.Request, err error) {
	var we *weft.Error
	if !errors.As(err, &we) {
		s.logger.Error("query failed", "endpoint", req.Subject(), "err", err)
		we = &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
	}
	body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: we})
	// The same header convention as the command API: the HTTP-like status
	// in Nats-Service-Error-Code, the protocol code in Nats-Service-Error.
	_ = req.Error(strconv.Itoa(api.Status(we.Code)), string(we.Code), body)
}

// decodeRequest decodes body into T, ignoring unknown fields and refusing
// schemas other than 1. An empty body is the zero request.
func decodeRequest[T any](body []byte, schema func(T) int) (T, error) {
	var v T
	if len(body) == 0 {
		return v, nil
	}
	if !json.Valid(body) {
		return v, &weft.Error{Code: weft.CodeInvalidJSON, Message: "the request body is not JSON"}
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, &weft.Error{Code: weft.CodeInvalidRequest, Message: err.Error()}
	}
	if n := schema(v); n != 0 && n != 1 {
		return v, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("schema %d is not supported (1 is)", n)}
	}
	return v, nil
}

func checkRun(run string) error {
	if !projections.ValidRunID(run) {
		return &weft.Error{Code: weft.CodeInvalidName, Message: fmt.Sprintf("run id %q must be 1-128 of [A-Za-z0-9_-]", run)}
	}
	return nil
}

func (s *Service) handleRun(ctx context.Context, body []byte) (any, error) {
	q, err := decodeRequest(body, func(r RunRequest) int { return r.Schema })
	if err != nil {
		return nil, err
	}
	v, projected, err := s.view(ctx, q.Run)
	if err != nil {
		return nil, err
	}
	reply, err := s.Family(ctx, v)
	reply.Projected = projected
	return reply, err
}

// Family computes the family status of the run viewed by v and the status
// of each of its child runs, reading every run of the family below v at
// most once (projected view, or folded from the log when not projected
// yet) and no deeper than MaxFamilyDepth. A child run with no events yet
// counts as not known.
func (s *Service) Family(ctx context.Context, v projections.RunView) (RunReply, error) {
	type known struct {
		status string
		family projections.Family
		ok     bool
	}
	seen := map[string]known{v.Run: {}} // v itself: a cycle is not known
	var failed error
	var lookup func(run string, depth int) known
	lookup = func(run string, depth int) known {
		if k, ok := seen[run]; ok {
			return k
		}
		seen[run] = known{}
		if depth > MaxFamilyDepth || failed != nil {
			return known{}
		}
		cv, err := s.View(ctx, run)
		if err != nil {
			if !errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
				failed = fmt.Errorf("family of %s: child %s: %w", v.Run, run, err)
			}
			return known{}
		}
		f := projections.FamilyStatus(cv, func(r string) (projections.Family, bool) {
			k := lookup(r, depth+1)
			return k.family, k.ok
		})
		k := known{status: cv.Status, family: f, ok: true}
		seen[run] = k
		return k
	}
	reply := RunReply{Schema: 1, View: v}
	for _, c := range v.Children {
		k := lookup(c.Run, 1)
		cs := ChildStatus{Run: c.Run}
		if k.ok {
			f := k.family
			cs.Status, cs.FamilyStatus = k.status, &f
		}
		reply.ChildStatus = append(reply.ChildStatus, cs)
	}
	reply.FamilyStatus = projections.FamilyStatus(v, func(r string) (projections.Family, bool) {
		k := lookup(r, 1)
		return k.family, k.ok
	})
	if failed != nil {
		return RunReply{}, failed
	}
	if v.Outcome != nil {
		forks, err := s.forks(ctx, v.Run)
		if err != nil {
			return RunReply{}, err
		}
		reply.Forks = forks
	}
	return reply, nil
}

// forks lists the runs restarted from run, oldest first (IndexForks).
func (s *Service) forks(ctx context.Context, run string) ([]Fork, error) {
	msgs, err := s.reader.watch(ctx, BucketIndex, IndexForks+".e.*."+Token(run)+".*")
	if err != nil {
		return nil, fmt.Errorf("forks of %s: %w", run, err)
	}
	var out []Fork
	for _, m := range msgs {
		var f Fork
		if err := json.Unmarshal(m.value, &f); err != nil {
			return nil, fmt.Errorf("forks of %s: %s: %w", run, m.key, err)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Fork) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.Run, b.Run)
	})
	return out, nil
}

// View returns a run's view at the head of its log: the stored view
// (weft_views) when the projector has caught up with the log, the stored
// view with the log's newer events folded onto it when the projector is
// behind, or the whole history folded when the run has no stored view yet.
// So a reader never sees a run go back: an answer is never older than one
// given before it (docs/protocol/50-queries.md, "run").
func (s *Service) View(ctx context.Context, run string) (projections.RunView, error) {
	v, _, err := s.view(ctx, run)
	return v, err
}

// view is View and the version of the run's stored view (0: none stored).
// When the log's head cannot be read, the stored view is answered as it is
// (the query answers while the log is away, as the projection's reader).
func (s *Service) view(ctx context.Context, run string) (projections.RunView, uint64, error) {
	if err := checkRun(run); err != nil {
		return projections.RunView{}, 0, err
	}
	var stored projections.RunView
	var projected uint64
	e, err := s.views.Get(ctx, run)
	switch {
	case err == nil:
		if stored, err = projections.DecodeView(e.Value()); err != nil {
			return projections.RunView{}, 0, err
		}
		projected = stored.Version
		if stored.Quarantine != nil {
			return stored, projected, nil
		}
		if _, h, err := s.log.Last(ctx, run); err != nil || h.Version <= stored.Version {
			return stored, projected, nil
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return projections.RunView{}, 0, fmt.Errorf("read view %s: %w", run, err)
	}
	envs, _, err := s.log.Load(ctx, run)
	var poison *eventlog.PoisonError
	if err != nil && !errors.As(err, &poison) {
		if projected > 0 {
			return stored, projected, nil
		}
		return projections.RunView{}, 0, fmt.Errorf("load %s: %w", run, err)
	}
	if len(envs) == 0 && poison == nil {
		return projections.RunView{}, 0, weft.UnknownRun(run)
	}
	v := stored
	for _, env := range envs {
		if env.Version <= v.Version {
			continue
		}
		r, err := Recorded(env)
		if err != nil {
			return projections.RunView{}, 0, err
		}
		v = projections.Apply(v, r)
	}
	if poison != nil {
		return projections.Quarantined(v, run, poison.Seq, poison.Reason).View, projected, nil
	}
	return v, projected, nil
}

// indexReady returns nil when the order indexes may be read: the index
// marker is at IndexVersion (remembered from then on), or no view is
// stored (nothing to list). Otherwise the index is not built yet — a
// store upgraded from before weft_index, until a projector starts on it
// (Run builds it) or a rebuild runs — and lists are *weft.Error
// unavailable rather than wrongly empty.
func (s *Service) indexReady(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	m, err := readIndexMarker(ctx, s.state)
	if err != nil {
		return err
	}
	if m.Version == IndexVersion {
		s.ready.Store(true)
		return nil
	}
	st, err := s.views.Status(ctx)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", BucketViews, err)
	}
	if st.Values() == 0 {
		return nil
	}
	return &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("the order indexes (%s) are not built for the stored views yet (index marker version %d, want %d): a projector builds them when it starts, or run weft rebuild", BucketIndex, m.Version, IndexVersion)}
}

func (s *Service) handleList(ctx context.Context, body []byte) (any, error) {
	q, err := decodeRequest(body, func(r ListRequest) int { return r.Schema })
	if err != nil {
		return nil, err
	}
	if err := s.indexReady(ctx); err != nil {
		return nil, err
	}
	spec, err := q.ListQuery.Spec()
	if err != nil {
		return nil, err
	}
	w := walk{r: s.reader, index: IndexRuns, tokens: filterToken(spec.Status) + "." + filterToken(spec.Agent), desc: true}
	if spec.Status == "" && spec.Agent == "" {
		w.nodes = anyTokens
	}
	if spec.After != nil {
		w.from = window(time.Unix(0, spec.After.Updated))
	}
	if !spec.Since.IsZero() {
		w.to = window(spec.Since)
	}
	// A page holds a run once (the paging contract): the projector never
	// keeps a run's old and new entries together, but a stale entry (one
	// a rebuild beside a live projector left) could meet the run's
	// current one; the summary of the later version is kept (the later
	// write when the versions are equal).
	var kept []projections.Summary
	var seqs []uint64
	at := map[string]int{}
	w.visit = func(msgs []kvMsg) (bool, error) {
		for _, m := range msgs {
			var sum projections.Summary
			if json.Unmarshal(m.value, &sum) != nil {
				continue
			}
			if i, ok := at[sum.Run]; ok {
				if sum.Version > kept[i].Version || sum.Version == kept[i].Version && m.seq > seqs[i] {
					kept[i], seqs[i] = sum, m.seq
				}
				continue
			}
			at[sum.Run] = len(kept)
			kept = append(kept, sum)
			seqs = append(seqs, m.seq)
		}
		n := 0
		for _, sum := range kept {
			if spec.Keep(sum) {
				n++
			}
		}
		return n > spec.Limit, nil
	}
	if err := w.run(ctx); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return spec.Finish(slices.DeleteFunc(kept, func(sum projections.Summary) bool { return !spec.Keep(sum) })), nil
}

// filterToken is an index filter token: the escaped value, or "*" for no
// filter.
func filterToken(v string) string {
	if v == "" {
		return "*"
	}
	return Token(v)
}

// inboxSpec is an InboxRequest checked and decoded.
type inboxSpec struct {
	run, agent string
	limit      int
	after      *inboxPosition
}

// inboxPosition is a position in an inbox's order (oldest first, then run
// and action id), as its cursor names it.
type inboxPosition struct {
	At     int64  `json:"u"`
	Run    string `json:"r"`
	Action string `json:"a"`
}

func (p inboxPosition) encode() string {
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b)
}

// compare orders (at, run, action) against p.
func (p inboxPosition) compare(at time.Time, run, action string) int {
	if c := cmp.Compare(at.UnixNano(), p.At); c != 0 {
		return c
	}
	if c := strings.Compare(run, p.Run); c != 0 {
		return c
	}
	return strings.Compare(action, p.Action)
}

func decodeInboxCursor(c string) (*inboxPosition, error) {
	bad := &weft.Error{Code: weft.CodeBadCursor, Message: "cursor is not one this service returned for an inbox"}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	var p inboxPosition
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&p) != nil || !projections.ValidRunID(p.Run) || p.Action == "" {
		return nil, bad
	}
	return &p, nil
}

func (s *Service) inboxFilter(body []byte) (inboxSpec, error) {
	q, err := decodeRequest(body, func(r InboxRequest) int { return r.Schema })
	if err != nil {
		return inboxSpec{}, err
	}
	if q.Run != "" && !projections.ValidRunID(q.Run) {
		return inboxSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "run", Message: fmt.Sprintf("run %q must be 1-128 of [A-Za-z0-9_-]", q.Run)}
	}
	if q.Agent != "" && !projections.ValidRunID(q.Agent) {
		return inboxSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "agent", Message: fmt.Sprintf("agent %q must be 1-128 of [A-Za-z0-9_-]", q.Agent)}
	}
	spec := inboxSpec{run: q.Run, agent: q.Agent, limit: q.Limit}
	if spec.limit == 0 {
		spec.limit = DefaultInboxLimit
	}
	if spec.limit < 0 || spec.limit > MaxInboxLimit {
		return inboxSpec{}, &weft.Error{Code: weft.CodeBadFilter, Reason: "limit", Message: fmt.Sprintf("limit must be 1..%d; got %d", MaxInboxLimit, q.Limit)}
	}
	if q.Cursor != "" {
		if spec.after, err = decodeInboxCursor(q.Cursor); err != nil {
			return inboxSpec{}, err
		}
	}
	return spec, nil
}

// inboxItem reads what an inbox's order and filters need of an item.
type inboxItem[T any] struct {
	at            func(T) time.Time
	run, action   func(T) string
	agent         func(T) string
	index, bucket string
}

// page answers one page of an inbox, oldest first: from the run's own
// keys of the inbox bucket when the request names a run, else by walking
// the inbox's order index from the cursor's window.
func (ii inboxItem[T]) page(ctx context.Context, r *indexReader, spec inboxSpec) ([]T, string, error) {
	// A page holds an item once, as the list holds a run once: of two
	// entries of one item (a stale one beside the current one), the later
	// write is kept.
	var kept []T
	var seqs []uint64
	at := map[string]int{}
	keep := func(msgs []kvMsg) {
		for _, m := range msgs {
			var it T
			if json.Unmarshal(m.value, &it) != nil {
				continue
			}
			if spec.run != "" && ii.run(it) != spec.run || spec.agent != "" && ii.agent(it) != spec.agent {
				continue
			}
			k := projections.ItemKey(ii.run(it), ii.action(it))
			if i, ok := at[k]; ok {
				if m.seq > seqs[i] {
					kept[i], seqs[i] = it, m.seq
				}
				continue
			}
			at[k] = len(kept)
			kept = append(kept, it)
			seqs = append(seqs, m.seq)
		}
	}
	after := func(it T) bool {
		return spec.after == nil || spec.after.compare(ii.at(it), ii.run(it), ii.action(it)) > 0
	}
	count := func() int {
		n := 0
		for _, it := range kept {
			if after(it) {
				n++
			}
		}
		return n
	}
	if spec.run != "" {
		msgs, err := r.last(ctx, ii.bucket, []string{spec.run + ".>"})
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", ii.index, err)
		}
		keep(msgs)
	} else {
		w := walk{r: r, index: ii.index, tokens: filterToken(spec.agent), visit: func(msgs []kvMsg) (bool, error) {
			keep(msgs)
			return count() > spec.limit, nil
		}}
		if spec.after != nil {
			w.from = window(time.Unix(0, spec.after.At))
		}
		if err := w.run(ctx); err != nil {
			return nil, "", fmt.Errorf("%s: %w", ii.index, err)
		}
	}
	kept = slices.DeleteFunc(kept, func(it T) bool { return !after(it) })
	slices.SortFunc(kept, func(a, b T) int {
		return inboxPosition{At: ii.at(b).UnixNano(), Run: ii.run(b), Action: ii.action(b)}.compare(ii.at(a), ii.run(a), ii.action(a))
	})
	next := ""
	if len(kept) > spec.limit {
		last := kept[spec.limit-1]
		next = inboxPosition{At: ii.at(last).UnixNano(), Run: ii.run(last), Action: ii.action(last)}.encode()
		kept = kept[:spec.limit]
	}
	return kept, next, nil
}

var (
	approvalsInbox = inboxItem[projections.ApprovalItem]{
		at:  func(it projections.ApprovalItem) time.Time { return it.Requested },
		run: func(it projections.ApprovalItem) string { return it.Run }, action: func(it projections.ApprovalItem) string { return it.Action },
		agent: func(it projections.ApprovalItem) string { return it.Agent.Name },
		index: IndexApprovals, bucket: BucketApprovals,
	}
	uncertainInbox = inboxItem[projections.UncertainItem]{
		at:  func(it projections.UncertainItem) time.Time { return it.Since },
		run: func(it projections.UncertainItem) string { return it.Run }, action: func(it projections.UncertainItem) string { return it.Action },
		agent: func(it projections.UncertainItem) string { return it.Agent.Name },
		index: IndexUncertain, bucket: BucketUncertain,
	}
	questionsInbox = inboxItem[projections.QuestionItem]{
		at:  func(it projections.QuestionItem) time.Time { return it.Since },
		run: func(it projections.QuestionItem) string { return it.Run }, action: func(it projections.QuestionItem) string { return it.Action },
		agent: func(it projections.QuestionItem) string { return it.Agent.Name },
		index: IndexQuestions, bucket: BucketQuestions,
	}
)

func (s *Service) handleApprovals(ctx context.Context, body []byte) (any, error) {
	q, err := s.inboxFilter(body)
	if err != nil {
		return nil, err
	}
	if err := s.indexReady(ctx); err != nil {
		return nil, err
	}
	items, next, err := approvalsInbox.page(ctx, s.reader, q)
	if err != nil {
		return nil, err
	}
	return ApprovalsReply{Schema: 1, Items: append([]projections.ApprovalItem{}, items...), Next: next}, nil
}

func (s *Service) handleUncertain(ctx context.Context, body []byte) (any, error) {
	q, err := s.inboxFilter(body)
	if err != nil {
		return nil, err
	}
	if err := s.indexReady(ctx); err != nil {
		return nil, err
	}
	items, next, err := uncertainInbox.page(ctx, s.reader, q)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	return UncertainReply{Schema: 1, Now: now, Items: append([]projections.UncertainItem{}, projections.Aged(items, now)...), Next: next}, nil
}

func (s *Service) handleQuestions(ctx context.Context, body []byte) (any, error) {
	q, err := s.inboxFilter(body)
	if err != nil {
		return nil, err
	}
	if err := s.indexReady(ctx); err != nil {
		return nil, err
	}
	items, next, err := questionsInbox.page(ctx, s.reader, q)
	if err != nil {
		return nil, err
	}
	return QuestionsReply{Schema: 1, Items: append([]projections.QuestionItem{}, items...), Next: next}, nil
}

func (s *Service) handleHistory(ctx context.Context, body []byte) (any, error) {
	q, err := decodeRequest(body, func(r HistoryRequest) int { return r.Schema })
	if err != nil {
		return nil, err
	}
	if err := checkRun(q.Run); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultHistoryLimit
	}
	if limit < 0 || limit > MaxHistoryLimit {
		return nil, &weft.Error{Code: weft.CodeBadFilter, Reason: "limit", Message: fmt.Sprintf("limit must be 1..%d; got %d", MaxHistoryLimit, q.Limit)}
	}
	envs, head, err := s.log.Load(ctx, q.Run)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", q.Run, err)
	}
	if len(envs) == 0 {
		return nil, weft.UnknownRun(q.Run)
	}
	if q.After > head.Version {
		return nil, &weft.Error{Code: weft.CodeBadCursor, Message: fmt.Sprintf("after %d is past the run's last version %d", q.After, head.Version)}
	}
	page := envs[q.After:]
	reply := HistoryReply{Schema: 1, Run: q.Run, Head: head, Events: []events.Envelope{}}
	if len(page) > limit {
		page = page[:limit]
		reply.Next = page[len(page)-1].Version
	}
	reply.Events = append(reply.Events, page...)
	return reply, nil
}
