// Package scale is Weft's scale test: a loader that puts many
// runs in the log quickly, decided by the real decision core, and `weft
// scale` (cmd/weft), which measures a runner's start-up, memory and CPU
// with those runs in the log against an empty log, the takeover of a
// partition, the query service's pages, and a 3-node cluster's throughput
// and recovery against one node. docs/scaling.md holds the figures.
package scale
