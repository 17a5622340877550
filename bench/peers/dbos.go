package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

// dbosSystem is DBOS Transact Go on a PostgreSQL 15 cluster of its own
// (initdb in a temporary directory, Debian's binaries, default
// synchronous_commit = on, fsync on).
type dbosSystem struct {
	dir    string
	pgBin  string
	pid    int
	ctx    dbos.Context
	wf     dbos.Workflow[int, string]
	cancel context.CancelFunc
	url    string
	stats  *pgx.Conn // -detail: reads pg_stat_statements
}

// pgBin finds Debian's PostgreSQL binaries (postgresql-15).
func pgBin() (string, error) {
	for _, d := range []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL binaries %w (apt-get install postgresql)", errNotFound)
}

func startDBOS(ctx context.Context, dir string) (system, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	s := &dbosSystem{dir: dir, pgBin: bin}
	data := filepath.Join(dir, "pg")
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		if os.Geteuid() == 0 {
			// PostgreSQL refuses to run as root: run it as the postgres
			// user Debian's package creates.
			cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(dir, 0o777); err != nil {
			return nil, err
		}
	}
	if err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pgOpts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", port, dir)
	if peerOpts.detail {
		pgOpts += " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_utility=on -c track_wal_io_timing=on"
	}
	if err := run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "pg.log"), "-o", pgOpts, "-w", "start"); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err == nil {
		s.pid, _ = strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if peerOpts.dbosUnix {
		// PostgreSQL's Unix socket (-k dir above) instead of loopback TCP.
		url = fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", dir, port)
	}
	s.url = url
	if peerOpts.dbosPool > 0 {
		url += fmt.Sprintf("&pool_max_conns=%d", peerOpts.dbosPool)
	}
	dctx, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "weft-peers", DatabaseURL: url,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		s.close()
		return nil, err
	}
	s.ctx = dctx
	s.wf = func(ctx dbos.Context, steps int) (string, error) {
		for i := range steps {
			if _, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) { return i, nil }, dbos.WithStepName(fmt.Sprint("step", i))); err != nil {
				return "", err
			}
		}
		return "done", nil
	}
	dbos.RegisterWorkflow(dctx, s.wf, dbos.WithWorkflowName("steps"))
	if err := dbos.Launch(dctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *dbosSystem) run(ctx context.Context, id string, steps int) error {
	h, err := dbos.RunWorkflow(s.ctx, s.wf, steps, dbos.WithWorkflowID(id))
	if err != nil {
		return err
	}
	_, err = h.GetResult()
	return err
}

func (s *dbosSystem) pids() []int {
	if s.pid == 0 {
		return nil
	}
	return []int{s.pid}
}

func (s *dbosSystem) close() {
	if s.ctx != nil {
		_ = dbos.Shutdown(s.ctx, 5*time.Second)
	}
	cmd := exec.Command(filepath.Join(s.pgBin, "pg_ctl"), "-D", filepath.Join(s.dir, "pg"), "-m", "immediate", "stop")
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(s.pgBin, "pg_ctl"), "-D", filepath.Join(s.dir, "pg"), "-m", "immediate", "stop")
	}
	_ = cmd.Run()
}

// beginDetail resets PostgreSQL's statement and WAL counters.
func (s *dbosSystem) beginDetail(ctx context.Context) error {
	c, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return err
	}
	s.stats = c
	if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	_, err = c.Exec(ctx, "SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')")
	return err
}

// detail is PostgreSQL's statements (calls per run, the most frequent
// first) and its WAL writes and flushes per run since beginDetail.
func (s *dbosSystem) detail(ctx context.Context, runs int) string {
	if s.stats == nil {
		return "no statistics"
	}
	defer s.stats.Close(ctx)
	per := func(v float64) float64 { return v / float64(max(runs, 1)) }
	var b strings.Builder
	var walRec, walBytes float64
	var walWrite, walSync int64
	if err := s.stats.QueryRow(ctx, "SELECT wal_records::float8, wal_bytes::float8, wal_write, wal_sync FROM pg_stat_wal").Scan(&walRec, &walBytes, &walWrite, &walSync); err != nil {
		return err.Error()
	}
	fmt.Fprintf(&b, "WAL per run: %.1f records, %.0f bytes, %.2f writes, %.2f flushes; statements per run (calls, mean ms):", per(walRec), per(walBytes), per(float64(walWrite)), per(float64(walSync)))
	rows, err := s.stats.Query(ctx, "SELECT calls, mean_exec_time, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY calls DESC LIMIT 25")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var calls int64
		var mean float64
		var q string
		if err := rows.Scan(&calls, &mean, &q); err != nil {
			return err.Error()
		}
		total += calls
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		fmt.Fprintf(&b, "\n    %.2f  %.3f  %s", per(float64(calls)), mean, q)
	}
	fmt.Fprintf(&b, "\n    %.2f statements per run in all", per(float64(total)))
	return b.String()
}
