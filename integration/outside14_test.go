package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session 14's attacks from outside: an ordinary role (and one with
// CREATEDB) against the build as a user runs it. Each test here failed on
// the code before its fix (bdeca27), or is skipped as a known bug.

// TestOutside14TemplateNameTaken: a role with CREATEDB that makes a
// database of the template's name while mzproxy is making its template
// (the first CREATE DATABASE through mzproxy starts that) keeps its
// database under its name. mzproxy used to rename it to
// mzproxy_template_old when it put its own template in place, and then
// fail to drop it: the role's database was gone from its name, and the
// template's name was mzproxy's.
func TestOutside14TemplateNameTaken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")
	p := startProxy(t, "--backend", pg.url())
	admin := connectTo(t, ctx, p.URL("postgres", "postgres"))
	mustExec(t, ctx, admin, "SELECT 1")

	// Hold the making of the template at its first step, the copy of
	// template1: COMMENT locks the database in a mode CREATE DATABASE's
	// lock on its source waits for.
	blocker := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, blocker, "BEGIN", "COMMENT ON DATABASE template1 IS 'held by the test'")
	created := make(chan error, 1)
	go func() {
		_, err := admin.Exec(ctx, "CREATE DATABASE first", pgx.QueryExecModeSimpleProtocol)
		created <- err
	}()
	watch := connectTo(t, ctx, pg.url())
	eventually(t, 60*time.Second, "mzproxy makes its template", func() bool {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
  WHERE query LIKE 'CREATE DATABASE `+templateName+`_next%' AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	maker := connectTo(t, ctx, pg.srv.ConnString("maker", "postgres"))
	mustExec(t, ctx, maker, "CREATE DATABASE "+templateName+" TEMPLATE template0")
	mustExec(t, ctx, blocker, "ROLLBACK")
	if err := <-created; err != nil {
		t.Fatalf("CREATE DATABASE first: %v", err)
	}
	eventually(t, 60*time.Second, "mzproxy is done making its template", func() bool {
		log := p.log.String()
		return strings.Contains(log, "could not make its template database") || strings.Contains(log, "made the template database")
	})

	rows, err := watch.Query(ctx, `SELECT datname, datdba::regrole::text FROM pg_database WHERE datname LIKE '`+templateName+`%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name, owner string
		err := r.Scan(&name, &owner)
		return name + " " + owner, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(owners, ", "); got != templateName+" maker" && got != templateName+" maker, "+templateName+"_next postgres" {
		t.Errorf("databases after mzproxy made its template: %s; want maker's %s kept under its name", got, templateName)
	}
	// The proxy goes on: a CREATE DATABASE copies template1 as before.
	mustExec(t, ctx, admin, "CREATE DATABASE second")
	p.mustAlive(t, ctx)
}

// TestOutside14PrepareTransaction: PREPARE TRANSACTION through mzproxy is
// refused (0A000) in every protocol, and the block is aborted (its COMMIT
// rolls back), as a PREPARE TRANSACTION that fails in PostgreSQL rolls the
// transaction back (session 16; before, the block went on). A prepared
// transaction outlives its session and every timeout: one that wrote a
// managed table kept the writers' gate, and every timestamped read and
// read-only transaction of the database waited for it until someone
// committed or rolled it back (on a server with max_prepared_transactions
// above 0).
func TestOutside14PrepareTransaction(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	pg.cfg.Settings["max_prepared_transactions"] = "5"
	pg.restart(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE writer LOGIN")
	p := startProxy(t, "--backend", pg.url())
	owner := connectTo(t, ctx, p.URL("postgres", "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE pt (k int PRIMARY KEY, v int)", "INSERT INTO pt VALUES (1, 0)",
		"GRANT SELECT, INSERT, UPDATE ON pt TO writer")
	t.Cleanup(func() {
		// What the old code let through, so that the cluster stops.
		rows, err := direct.Query(context.Background(), "SELECT gid FROM pg_prepared_xacts")
		if err != nil {
			return
		}
		gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, gid := range gids {
			_, _ = direct.Exec(context.Background(), "ROLLBACK PREPARED '"+strings.ReplaceAll(gid, "'", "''")+"'")
		}
	})

	w := connectTo(t, ctx, p.URL("writer", "postgres"))
	reader := connectTo(t, ctx, p.URL("writer", "postgres"))
	mustExec(t, ctx, reader, "SET statement_timeout = '5s'")
	for _, c := range []struct {
		name  string
		begin []string
		mode  pgx.QueryExecMode
	}{
		{"write, simple", []string{"BEGIN", "UPDATE pt SET v = v + 1 WHERE k = 1"}, pgx.QueryExecModeSimpleProtocol},
		{"write, extended", []string{"BEGIN", "UPDATE pt SET v = v + 1 WHERE k = 1"}, pgx.QueryExecModeCacheStatement},
		{"read-only, simple", []string{"BEGIN", "SELECT v, mz_now() FROM pt"}, pgx.QueryExecModeSimpleProtocol},
		{"autocommit, simple", nil, pgx.QueryExecModeSimpleProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			mustExec(t, ctx, w, c.begin...)
			_, err := w.Exec(ctx, "PREPARE TRANSACTION 'gid1'", c.mode)
			wantCode(t, err, "0A000")
			if c.begin != nil {
				if s := w.PgConn().TxStatus(); s != 'E' {
					t.Errorf("the block after the refusal: status %q, want 'E'", s)
				}
				tag, err := w.Exec(ctx, "COMMIT", pgx.QueryExecModeSimpleProtocol)
				if err != nil || tag.String() != "ROLLBACK" {
					t.Errorf("COMMIT of the block after the refusal: %q, %v; want ROLLBACK", tag, err)
				}
			}
			var n int
			if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d prepared transactions after PREPARE TRANSACTION through mzproxy", n)
			}
			var ts int64
			if err := reader.QueryRow(ctx, "SELECT mz_now() FROM pt", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
				t.Fatalf("a timestamped read after PREPARE TRANSACTION: %v", err)
			}
		})
	}
	var v int
	if err := reader.QueryRow(ctx, "SELECT v FROM pt", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != 0 {
		t.Errorf("pt.v = %d (%v), want 0: the two write blocks rolled back", v, err)
	}
	// COMMIT PREPARED and ROLLBACK PREPARED still reach PostgreSQL, for
	// transactions prepared directly.
	_, err := w.Exec(ctx, "ROLLBACK PREPARED 'nothing'", pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "42704")
	p.mustAlive(t, ctx)
}

// TestOutside14TempTableShadows: a temporary table of a session hides a
// managed table of the same name from that session's unqualified names,
// as PostgreSQL searches pg_temp first. A timestamped read must then read
// the temporary table (or fail) as PostgreSQL's own read does; mzproxy
// reads the managed table's history, a relation the statement does not
// name under PostgreSQL's rules (a role without SELECT on the managed
// table gets 42501 for the history table instead of its own rows).
func TestOutside14TempTableShadows(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{})
	ctx, role, p := st.ctx, st.role, st.proxies[0]
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE shadowed (v text)", "INSERT INTO shadowed VALUES ('managed')",
		"GRANT SELECT ON shadowed TO "+role, "CREATE TABLE hidden (v text)", "INSERT INTO hidden VALUES ('managed')")
	c := connectTo(t, ctx, p.URL(role, st.db))
	mustExec(t, ctx, c, "CREATE TEMP TABLE shadowed (v text)", "INSERT INTO shadowed VALUES ('temp')",
		"CREATE TEMP TABLE hidden (v text)", "INSERT INTO hidden VALUES ('temp')")
	for _, sql := range []string{
		"SELECT v FROM shadowed", "SELECT v FROM shadowed AS OF AT LEAST 0", "SELECT v FROM shadowed WHERE mz_now() > 0",
		"SELECT v FROM hidden", "SELECT v FROM hidden AS OF AT LEAST 0",
	} {
		var v string
		err := c.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v)
		if err != nil || v != "temp" {
			t.Errorf("%s: %q (%v), want the temporary table's row, as PostgreSQL reads it", sql, v, err)
		}
	}
	p.mustAlive(t, ctx)
}
