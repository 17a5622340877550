package api

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft/internal/inflight"
)

// DefaultStartsInFlight is how many starts a process has admitted and
// not answered yet, at most, unless WithStartsInFlight says otherwise.
const DefaultStartsInFlight = 64

// WithStartsInFlight sets how many starts this process admits before it
// answers them (default DefaultStartsInFlight, at least the start
// endpoint's lanes, WithLanes: a start takes its slot before it is
// checked or forwarded, so a bound below the lanes would serve fewer
// starts at once than a lane that holds its request). A start holds
// its lane only until its decision goes to the log (ReleaseLane); the
// lane then takes the next request while the start waits for its append
// and is answered from its own goroutine. At the bound a lane waits for
// a start in flight to be answered before it admits its request, as a
// lane that holds its request to the end waits: the queue group's other
// runners take the requests this one does not
// (docs/adr/0041-a-start-s-reads-and-lane.md).
func WithStartsInFlight(n int) ServeOption {
	return func(s *service) { s.startsInFlight = max(n, 1) }
}

// laneKey is the context key of a request's lane release (ReleaseLane).
type laneKey struct{}

// ReleaseLane frees the lane that serves ctx's request, when its endpoint
// lets a request go on off its lane (start): the backend calls it once its
// decision is queued for the append. The request goes on in its own
// goroutine and is answered once, when the backend returns, as before. It
// does nothing for any other context.
func ReleaseLane(ctx context.Context) {
	if f, ok := ctx.Value(laneKey{}).(func()); ok {
		f()
	}
}

// inFlight bounds the requests of a releasing endpoint in flight (admitted,
// not answered) and tells when none is (Quiet).
type inFlight struct {
	slots chan struct{}
	inflight.Tracker
}

func newInFlight(n int) *inFlight {
	return &inFlight{slots: make(chan struct{}, n)}
}

// serveReleasing serves r with h on a lane that the backend may release
// (ReleaseLane): it waits for a slot (in the lane, at the bound), runs
// the request in its own goroutine and returns when the request was
// answered or released its lane, whichever comes first. An answer given
// before the release goes through the micro request (the service's stats
// count its error); after it, it is published to the request's reply
// subject with the same headers.
func (s *service) serveReleasing(p *inFlight, r micro.Request, h func(context.Context, []byte) (any, string, error)) {
	p.slots <- struct{}{}
	p.Add()
	lr := &laneRequest{Request: r, nc: s.nc}
	released, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() {
		once.Do(func() {
			lr.detached.Store(true)
			close(released)
		})
	}
	go func() {
		defer func() {
			<-p.slots
			p.Done()
		}()
		defer close(done)
		s.handleReleasing(lr, h, release)
	}()
	select {
	case <-released:
	case <-done:
	}
}

// laneRequest is a request whose answer may come after its lane was
// released: then it is published to the reply subject directly, never
// through the micro request, which its lane has finished with.
type laneRequest struct {
	micro.Request
	nc       *nats.Conn
	detached atomic.Bool
}

func (l *laneRequest) Respond(b []byte, opts ...micro.RespondOpt) error {
	if !l.detached.Load() {
		return l.Request.Respond(b, opts...)
	}
	return l.publish(&nats.Msg{Data: b}, opts)
}

func (l *laneRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if !l.detached.Load() {
		return l.Request.Error(code, description, data, opts...)
	}
	m := &nats.Msg{Header: nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}, Data: data}
	return l.publish(m, opts)
}

func (l *laneRequest) publish(m *nats.Msg, opts []micro.RespondOpt) error {
	for _, o := range opts {
		o(m)
	}
	m.Subject = l.Reply()
	return l.nc.PublishMsg(m)
}

// Service is the weft micro service that Serve returns.
//
// Its Stop is micro's: the endpoints' subscriptions are drained (no new
// request is taken) and it returns at once, without waiting for the
// requests being served — including the starts in flight off their
// lanes, which go on and are each answered once, when their backend
// returns. Quiet tells when those starts are all answered: a caller that
// must not outlive them waits for it, bounded by its own deadline (the
// runner: within its drain window, then it ends the starts still in
// flight and waits again, docs/adr/0041-a-start-s-reads-and-lane.md).
type Service interface {
	micro.Service
	// Quiet returns a channel closed once no start admitted is unanswered
	// (at the moment of the call: a start admitted later opens a new one).
	Quiet() <-chan struct{}
}

type served struct {
	micro.Service
	starts *inFlight
}

func (s *served) Quiet() <-chan struct{} { return s.starts.Quiet() }
