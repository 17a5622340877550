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

// Owner returns the runner that partition p is assigned to among runners
// (their ids, in any order; duplicates count once): the one with the
// highest rendezvous (highest random weight) score fnv1a64(id, p), ties
// broken by the smaller id. It is "" when runners is empty.
//
// Every runner that sees the same set computes the same assignment, and a
// runner joining or leaving a set of n moves only the partitions it gains
// or held — about P/n of them — instead of reshuffling every partition.
func Owner(p int, runners []string) string {
	best, bestScore := "", uint64(0)
	for _, id := range runners {
		s := score(p, id)
		if best == "" || s > bestScore || (s == bestScore && id < best) {
			best, bestScore = id, s
		}
	}
	return best
}

func score(p int, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	var b [9]byte
	b[0] = '/'
	for i := range 8 {
		b[1+i] = byte(uint64(p) >> (8 * i))
	}
	_, _ = h.Write(b[:])
	// fnv's last bytes mix poorly into its high bits: finish with a
	// 64-bit mixer (splitmix64's) so that scores of close partitions are
	// independent.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
