package main

import (
	"testing"
	"time"
)

// A PostgreSQL backend that ends within a window is reaped by the
// postmaster: its CPU is in the postmaster's cutime and cstime, which
// must count, or the CPU per run of DBOS misses every ended backend's.
func TestCPUPerRunCountsTheServersReapedChildren(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime ...
	line := "4242 (postgres: main) S 1 4242 4242 0 -1 4194560 100 200 0 0 30 20 400 100 20 0 1 0 5 0 0"
	ppid, cpu, ok := parseStat(line)
	if !ok || ppid != 1 {
		t.Fatalf("parseStat = %d, %v, %v; want parent 1", ppid, cpu, ok)
	}
	if want := (30 + 20 + 400 + 100) * clockTick; cpu != want {
		t.Fatalf("CPU %v, want %v (utime, stime, cutime, cstime)", cpu, want)
	}
}

// The others' load is the machine's busy time: idle, iowait and steal are
// not busy, and guest time is already in user.
func TestOthersLoadCountsOnlyBusyTime(t *testing.T) {
	// cpu user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  1000 10 300 5000 70 2 8 900 40 4\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
	if got, want := parseBusy(stat), (1000+10+300+2+8)*clockTick; got != want {
		t.Fatalf("busy %v, want %v", got, want)
	}
}

// A round the rest of the machine disturbed is not comparable (the load
// does not hit every system alike): the median is of the undisturbed
// rounds while there are any, and of all rounds otherwise.
func TestTheMedianLeavesOutDisturbedRounds(t *testing.T) {
	rs := []result{
		{Rate: 100, Others: 1.2},
		{Rate: 600, Others: 0.1},
		{Rate: 50, Others: 1.5},
		{Rate: 640, Others: 0.05},
		{Rate: 620, Others: 0.2},
	}
	r, ok := median(rs, 0.25)
	if !ok || r.Rate != 620 {
		t.Fatalf("median %v (%v), want the undisturbed rounds' 620", r.Rate, ok)
	}
	r, ok = median([]result{{Rate: 100, Others: 1.2}, {Rate: 50, Others: 1.5}, {Rate: 80, Others: 1}}, 0.25)
	if !ok || r.Rate != 80 {
		t.Fatalf("median %v (%v), want 80 of all rounds when none was undisturbed", r.Rate, ok)
	}
	if _, ok := median([]result{{Err: "cannot start"}}, 0.25); ok {
		t.Fatal("a system that never ran has no median")
	}
}

// The per-step figure subtracts the p50 of 0-step runs from that of
// 3-step runs; pct is the nearest-rank percentile.
func TestPct(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4}
	if pct(d, 50) != 2 || pct(d, 100) != 4 || pct(nil, 50) != 0 {
		t.Fatalf("pct: %v %v %v", pct(d, 50), pct(d, 100), pct(nil, 50))
	}
}
