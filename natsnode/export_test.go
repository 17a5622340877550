package natsnode

import "time"

// VarzSync is what the embedded server's monitoring (varz) says of its
// JetStream sync: always, or the interval. For tests.
func VarzSync(n *Node) (always bool, every time.Duration) {
	v, err := n.srv.Varz(nil)
	if err != nil {
		panic(err)
	}
	return v.JetStream.Config.SyncAlways, v.JetStream.Config.SyncInterval
}
