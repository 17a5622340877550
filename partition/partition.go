// Package partition assigns runs to partitions: Of(run, p) is
// fnv1a32(run) % p, the hash nats-server's subject mapping function
// partition(p, token) computes for the token, so that a subject mapping
// such as
//
//	weft.run.*.events -> weft.part.{{partition(64,1)}}.{{wildcard(1)}}.events
//
// routes a run's messages to the partition the runners give it
// (docs/adr/0019-partitions.md). It is pure: no I/O, no clock.
package partition

import "hash/fnv"

// Of returns the partition of run among p partitions: fnv1a32(run) % p, in
// [0, p). It returns 0 when p < 1.
func Of(run string, p int) int {
	if p < 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(run))
	return int(h.Sum32() % uint32(p))
}
