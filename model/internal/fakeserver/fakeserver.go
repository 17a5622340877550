// Package fakeserver is the scripted HTTP server behind the providers' fake
// servers (model/openai/openaitest, model/anthropic/anthropictest): an
// httptest.Server on loopback that records every request and answers each
// one with the next scripted Response, in order.
package fakeserver

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// Response is one scripted answer.
type Response struct {
	// Status is the HTTP status; zero means 200.
	Status int
	// Header holds extra response headers, such as Retry-After.
	Header http.Header
	// Body is the response body, sent as application/json.
	Body []byte
	// Reset closes the connection without answering (a connection reset as
	// the client sees it).
	Reset bool
	// Cut sends the status line, the headers (with the full Content-Length)
	// and half of Body, then closes the connection: a reply cut short by
	// the network.
	Cut bool
	// Hang waits until the client gives up (its context ends) and then
	// closes the connection.
	Hang bool
}

// Request is one request the server received.
type Request struct {
	// Method and Path of the request, such as POST /v1/chat/completions.
	Method, Path string
	// Header is the request's headers.
	Header http.Header
	// Body is the raw request body.
	Body []byte
}

// Responder computes the answer to a request; see Server.Respond.
type Responder func(req Request) Response

// Server is a scripted fake provider.
type Server struct {
	srv      *httptest.Server
	t        testing.TB
	fallback Responder

	mu       sync.Mutex
	requests []Request
	script   []Response
}

// Start starts a Server on a loopback port and closes it when t ends.
// A request that finds the script empty and no Responder is answered with a
// 500 and fails t.
func Start(t testing.TB) *Server {
	s := &Server{t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL returns the server's root URL, such as http://127.0.0.1:41234.
func (s *Server) URL() string { return s.srv.URL }

// Close shuts the server down; later requests find nothing listening.
func (s *Server) Close() { s.srv.Close() }

// Enqueue appends responses to the script.
func (s *Server) Enqueue(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, rs...)
}

// Respond sets the responder used once the script is empty. It lets an
// end-to-end test answer from what the request holds (for example, finish
// once the transcript carries tool results).
func (s *Server) Respond(r Responder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = r
}

// Requests returns a copy of the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Pending returns how many scripted responses are still unused.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	var resp Response
	var ok bool
	if len(s.script) > 0 {
		resp, s.script, ok = s.script[0], s.script[1:], true
	}
	fallback := s.fallback
	s.mu.Unlock()
	if !ok {
		if fallback == nil {
			s.t.Errorf("fakeserver: %s %s with no scripted response left", r.Method, r.URL.Path)
			http.Error(w, `{"error":{"type":"fake_server","message":"no scripted response left"}}`, http.StatusInternalServerError)
			return
		}
		resp = fallback(req)
	}
	switch {
	case resp.Reset:
		closeConn(w)
		return
	case resp.Cut:
		cut(w, resp)
		return
	case resp.Hang:
		<-r.Context().Done()
		closeConn(w)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.Copy(w, bytes.NewReader(resp.Body))
}

// closeConn hijacks the connection and closes it without a response.
func closeConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("fakeserver: response writer cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // close with RST: the client sees a reset
	}
	_ = conn.Close()
}

// cut writes a raw HTTP/1.1 response whose body stops halfway, then resets.
func cut(w http.ResponseWriter, resp Response) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("fakeserver: response writer cannot hijack")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", status, http.StatusText(status), len(resp.Body))
	_, _ = buf.Write(resp.Body[:len(resp.Body)/2])
	_ = buf.Flush()
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
}
