package natstest

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/loopport"
)

// clusterReady bounds each stage of StartCluster's wait (every server
// listening; the JetStream meta leader seeing every peer; the JetStream
// API answering). It is long because a loaded machine (a package's tests
// run in parallel, each with its servers) starts a clustered JetStream
// server slowly; a server that cannot start at all is found at once
// (startFailure), not by this deadline.
const clusterReady = 60 * time.Second

// clusterTries is how many times StartCluster starts a cluster whose route
// port was taken meanwhile, each time on new ports.
const clusterTries = 3

// pickPort returns a free loopback port (loopport.Free: outside the
// ephemeral range, so that no outgoing connection takes it while a node
// of the cluster is down). A test replaces it to hand out a port that is
// taken.
var pickPort = func() (int, error) {
	ports, err := loopport.Free(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// StartCluster starts n real in-process nats-servers with JetStream on
// random loopback ports, routed into one cluster named "weft-" and the
// start of its token, each with its store in t.TempDir(), stopped on
// t.Cleanup. It returns once the JetStream
// meta leader answers and a stream of n replicas can be placed (a probe
// stream, deleted again), with the
// client URLs joined by commas, ready for nats.Connect. As Start's server,
// every server of the cluster requires the cluster's own token, which each
// URL carries: a client of another test's server whose port one of these
// took is refused, not served this cluster's streams. The routes carry no
// token, but each cluster has its own name: a server keeps its route port
// too, and a route to a port another test's cluster node took is refused
// by nats-server (the cluster names differ) instead of merging the two
// clusters.
//
// Route ports are picked up front (a listener on port 0, closed again) so
// that every server can name all routes: a clustered JetStream server opens
// its route listener only after it has started. Another process or test may
// take such a port before its server listens on it; the server then cannot
// start (it says so through its logger, startFailure), and the cluster is
// started again on new ports, at most clusterTries times. Any other failure
// to start fails the test at once.
func StartCluster(t testing.TB, n int) string {
	t.Helper()
	for try := 1; ; try++ {
		url, err := startCluster(t, n)
		if err == nil {
			return url
		}
		var taken *portTaken
		if !errors.As(err, &taken) || try == clusterTries {
			t.Fatal(err)
		}
		t.Logf("cluster start, try %d: %v; starting it again on new ports", try, err)
	}
}

// portTaken is a cluster start that failed because a server's route port
// was taken before it could listen on it.
type portTaken struct{ msg string }

func (e *portTaken) Error() string { return e.msg }

// startFailure is a server's logger that keeps only what makes its start
// fail: the server reports a listener it cannot open with Fatalf (and then
// never becomes ready; without a logger nothing would say why).
type startFailure struct{ fatal chan string }

func (l startFailure) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (startFailure) Noticef(string, ...any) {}
func (startFailure) Warnf(string, ...any)   {}
func (startFailure) Errorf(string, ...any)  {}
func (startFailure) Debugf(string, ...any)  {}
func (startFailure) Tracef(string, ...any)  {}

// startCluster is one try of StartCluster. On an error the servers it
// started are shut down.
func startCluster(t testing.TB, n int) (url string, err error) {
	routes := make([]int, n)
	var seeds []string
	for i := range routes {
		if routes[i], err = pickPort(); err != nil {
			return "", err
		}
		seeds = append(seeds, fmt.Sprintf("nats://127.0.0.1:%d", routes[i]))
	}
	servers := make([]*server.Server, 0, n)
	defer func() {
		if err != nil {
			for _, srv := range servers {
				srv.Shutdown()
				srv.WaitForShutdown()
			}
		}
	}()
	token := newToken(t)
	fatal := make(chan string, n)
	for i := range n {
		o := &server.Options{
			Authorization: token,
			ServerName:    fmt.Sprintf("weft-%d", i+1),
			Host:          "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "weft-" + token[:8], Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(seeds, ",")),
		}
		srv, err := server.NewServer(o)
		if err != nil {
			return "", err
		}
		srv.SetLogger(startFailure{fatal: fatal}, false, false)
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		servers = append(servers, srv)
	}
	deadline := time.Now().Add(clusterReady)
	// failed reports a server's failure to start, if one said so.
	failed := func() error {
		select {
		case msg := <-fatal:
			if strings.Contains(msg, "router port") {
				return &portTaken{msg: "a route port was taken: " + msg}
			}
			return errors.New("a server could not start: " + msg)
		default:
			return nil
		}
	}
	var urls []string
	for i, srv := range servers {
		for !srv.ReadyForConnections(50 * time.Millisecond) {
			if err := failed(); err != nil {
				return "", err
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("server %d not listening after %s", i+1, clusterReady)
			}
		}
		u, err := neturl.Parse(srv.ClientURL())
		if err != nil {
			return "", err
		}
		u.User = neturl.User(token)
		urls = append(urls, u.String())
	}
	// Ready when the meta leader sees every peer online with JetStream (a
	// placement of n replicas before that fails with "peer offline").
	deadline = time.Now().Add(clusterReady)
	for {
		ready := false
		for _, srv := range servers {
			if len(srv.JetStreamClusterPeers()) == n {
				ready = true
			}
		}
		if ready {
			break
		}
		if err := failed(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the JetStream cluster never saw its %d peers within %s", n, clusterReady)
		}
		time.Sleep(20 * time.Millisecond)
	}
	url = strings.Join(urls, ",")
	nc, err := nats.Connect(url)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	deadline = time.Now().Add(clusterReady)
	for {
		// Each try has its own deadline: a request sent before the
		// cluster is ready may get no reply at all.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("cluster JetStream never ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Ready when a stream of n replicas can be placed: the meta leader's
	// count of peers above can include a peer whose latest statistics it
	// has not yet received, and a placement then fails with "no suitable
	// peers for placement, peer offline" (seen on a loaded machine). A
	// probe stream is created and deleted again, so that the cluster holds
	// nothing the test did not make.
	deadline = time.Now().Add(clusterReady)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"}, Replicas: n, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "NATSTEST_PROBE")
		}
		cancel()
		if err == nil {
			return url, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("cluster cannot place %d replicas: %w", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
