package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPipelineFirstStatement: a pipelined batch that prepares a
// timestamped read (its Parse only) and then runs a command PostgreSQL
// refuses inside a pipeline (DISCARD ALL, VACUUM) runs the command, as
// PostgreSQL runs it as the batch's first statement, also when mzproxy
// must ask the backend for the session's search_path for the Parse (after
// a DISCARD ALL): its SHOW is a batch of its own, which does not put the
// client's batch in a pipeline (25001 before). With pgx's pipeline mode
// and psycopg 3's (libpq's), each also run against PostgreSQL itself; with
// pgx also when a Parse and Describe of another statement came first.
func TestPipelineFirstStatement(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx, db, p := st.ctx, st.db, st.proxies[0]
	owner := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, owner, "CREATE TABLE g (k int PRIMARY KEY, v text)", "INSERT INTO g VALUES (1, 'v1')")
	const read = "SELECT v FROM g WHERE k = $1 AS OF mz_now()"
	targets := []struct {
		name, url, read string
	}{
		{"postgres", directURL("postgres", db), directText(read, true)},
		{"mzproxy", p.URL("postgres", db), read},
	}
	for _, target := range targets {
		t.Run("pgx "+target.name, func(t *testing.T) {
			conn := connectTo(t, ctx, target.url)
			for _, command := range []string{"DISCARD ALL", "VACUUM pg_catalog.pg_am"} {
				if err := conn.PgConn().Exec(ctx, "DISCARD ALL").Close(); err != nil {
					t.Fatal(err)
				}
				if got := pgxPipeline(ctx, conn.PgConn(), target.read, command, false); got != "prepared; "+command+" ok; sync" {
					t.Errorf("%s: %s", command, got)
				}
				// A Parse and Describe of another statement before it
				// reached the backend: no Execute yet, so the command
				// still runs (25001 before: mzproxy's SHOW ran inside).
				if err := conn.PgConn().Exec(ctx, "DISCARD ALL").Close(); err != nil {
					t.Fatal(err)
				}
				if got := pgxPipeline(ctx, conn.PgConn(), target.read, command, true); got != "prepared; prepared; "+command+" ok; sync" {
					t.Errorf("%s after a Parse: %s", command, got)
				}
			}
		})
		t.Run("psycopg "+target.name, func(t *testing.T) {
			command, err := pythonModule("psycopg")()
			requireDriver(t, err, "apt-get install -y python3-psycopg")
			url := target.url
			if target.name == "mzproxy" {
				host, port := p.hostPort()
				url = libpqURL(host, port, db)
			}
			results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, command[0], "psycopg_pipeline_first.py", url, target.read)
			for _, name := range []string{"discard", "vacuum"} {
				if failure, ran := results[name]; !ran || failure != "" {
					t.Errorf("%s: ran %v: %s", name, ran, failure)
				}
			}
		})
	}
	p.mustAlive(t, ctx)
}

// pgxPipeline sends, in one pgx pipeline, the Parse of read and command,
// then a Sync, and spells out what came back; parseFirst puts the Parse
// and Describe of another statement first.
func pgxPipeline(ctx context.Context, conn *pgconn.PgConn, read, command string, parseFirst bool) string {
	pl := conn.StartPipeline(ctx)
	defer pl.Close()
	if parseFirst {
		pl.SendPrepare("first", "SELECT 1", nil)
	}
	pl.SendPrepare("read", read, nil)
	pl.SendQueryParams(command, nil, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		return err.Error()
	}
	var out string
	for {
		res, err := pl.GetResults()
		switch r := res.(type) {
		case *pgconn.StatementDescription:
			out += "prepared; "
		case *pgconn.ResultReader:
			if _, err := r.Close(); err != nil {
				out += fmt.Sprintf("%s: %s; ", command, sqlState(err))
			} else {
				out += command + " ok; "
			}
		case *pgconn.PipelineSync:
			return out + "sync"
		case nil:
			if err != nil {
				return out + fmt.Sprintf("error %s (%v)", sqlState(err), err)
			}
			return out + "no sync"
		}
	}
}
