package natstest

import (
	"io/fs"
	"os"
	"path/filepath"
)

// DeliveryState is the consumers' delivery state as the server had written
// it to its store when SaveDeliveryState was called (see CrashRestart).
type DeliveryState struct {
	files map[string][]byte // consumer state file path -> contents
}

// SaveDeliveryState copies the delivery state of every consumer on the
// server as stored now: which messages it delivered, how often, and which
// were acknowledged (each consumer's o.dat).
func (s *Server) SaveDeliveryState() DeliveryState {
	s.t.Helper()
	st := DeliveryState{files: map[string][]byte{}}
	err := filepath.WalkDir(s.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "o.dat" || filepath.Base(filepath.Dir(filepath.Dir(path))) != "obs" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		st.files[path] = b
		return nil
	})
	if err != nil {
		s.t.Fatalf("natstest: save delivery state: %v", err)
	}
	if len(st.files) == 0 {
		s.t.Fatal("natstest: save delivery state: no consumer on the server")
	}
	return st
}

// CrashRestart restarts the server as a crash of its process (SIGKILL)
// can leave its store: every message a stream acknowledged is kept (a
// single-replica stream writes each message before acknowledging it), but
// the consumers' delivery state is the one saved in st — the server writes
// that state lazily (within about 100 ms of a change), so a crash forgets
// the latest deliveries, and the messages delivered since st are delivered
// again as first deliveries (num_delivered 1) although a client took them.
// Consumers created after st keep their state. The port and store are
// kept; Conn, JS and Log belong to the new server, and connections opened
// with Connect reconnect by themselves.
func (s *Server) CrashRestart(st DeliveryState) {
	s.t.Helper()
	s.stop()
	for path, b := range st.files {
		if _, err := os.Stat(path); err != nil {
			continue // the consumer was deleted since
		}
		if err := os.WriteFile(path, b, 0o640); err != nil {
			s.t.Fatalf("natstest: crash restart: %v", err)
		}
	}
	s.start()
}
