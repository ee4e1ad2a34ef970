package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestInstallIdempotentAndConcurrent(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		conn := connect(t, cs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Install(ctx, conn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
	}
	conn := connect(t, cs)
	upper := queryInt(t, conn, UpperSQL)
	// Again: a no-op that keeps the state.
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// One row per migration (a version number may be skipped while
	// versions are merged from several branches), the last SchemaVersion.
	// (An empty entry is another branch's version, not yet merged.)
	want := 0
	for _, m := range migrations {
		if m != "" {
			want++
		}
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.schema_version"); got != int64(want) {
		t.Errorf("schema_version rows = %d, want %d", got, want)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM mzproxy.schema_version"); got != SchemaVersion {
		t.Errorf("schema version %d, want %d", got, SchemaVersion)
	}
	if got := queryInt(t, conn, UpperSQL); got != upper {
		t.Errorf("upper changed by re-install: %d -> %d", upper, got)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'mzproxy%'"); got != 3 {
		t.Errorf("event triggers = %d, want 3 (storage 38: mzproxy_pending_drop)", got)
	}
	if r, u := queryInt(t, conn, ReadTSSQL), queryInt(t, conn, UpperSQL); r < upper-1 || u != r+1 {
		t.Errorf("fresh pin %d, upper %d then %d: want a pin no lower than the upper-1, then upper = pin+1", r, upper, u)
	}
}

func TestInstallNeedsSuperuser(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzweak; CREATE ROLE mzweak LOGIN"); err != nil {
		t.Fatal(err)
	}
	weak := connect(t, server.ConnString("mzweak", conn.Config().Database))
	err := Install(ctx, weak)
	if !errors.Is(err, ErrNotSuperuser) {
		t.Fatalf("Install as non-superuser: %v, want ErrNotSuperuser", err)
	}
	t.Log(err)
}

// TestUpgradeFromVersion1: a database installed at version 1 keeps its
// state and reaches SchemaVersion.
func TestUpgradeFromVersion1(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	v1 := strings.ReplaceAll(installSQL, "@SCHEMA@", Schema)
	if _, err := conn.PgConn().Exec(ctx, "BEGIN; "+v1+"; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, "CREATE TABLE t (k int PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	upper := queryInt(t, conn, UpperSQL)
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM mzproxy.schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after upgrade", got)
	}
	if got := queryInt(t, conn, UpperSQL); got < upper {
		t.Errorf("upper went back in the upgrade: %d -> %d", upper, got)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.collections WHERE retain_ms IS NULL"); got != 1 {
		t.Errorf("collections on the default retention after upgrade: %d", got)
	}
	inWrite(t, conn, "INSERT INTO t VALUES (2)")
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_to = $1", Infinity); got != 2 {
		t.Errorf("current versions after upgrade: %d", got)
	}
	// Version 9 made the trigger functions of the table managed before it
	// again, with the one-statement retraction.
	if got := queryInt(t, conn, "SELECT count(*) FROM pg_proc WHERE oid = 'mzproxy.h1_upd'::regproc AND prosrc LIKE '%MATERIALIZED%'"); got != 0 {
		t.Errorf("h1_upd kept the retraction of version 8")
	}
	inWrite(t, conn, "UPDATE t SET k = 3 WHERE k = 2")
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_to = $1", Infinity); got != 2 {
		t.Errorf("current versions after an update: %d", got)
	}
	// The primary key's mirror, made at version 1, is recorded by the
	// upgrade, so that dropping the key finds it.
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.index_mirrors WHERE index_oid = 't_pkey'::regclass AND mirror = format('h1_k%s', 't_pkey'::regclass::oid)"); got != 1 {
		t.Errorf("mirror records of t_pkey after upgrade: %d, want 1", got)
	}
}

// TestFreshInstallFiresNoEventTrigger: installing into a database without
// the schema runs none of mzproxy's event triggers (version 15's install
// ran them at each of its DDL statements after the first part), and the
// event triggers are in place and fire afterwards.
func TestFreshInstallFiresNoEventTrigger(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	if _, err := conn.Exec(ctx, "SET track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	calls := func() int64 {
		t.Helper()
		// The session's counts reach the shared statistics when it is next
		// idle; read them in a transaction after that.
		if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		return queryInt(t, conn, `SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
			WHERE schemaname = $1 AND funcname IN ('on_ddl_command_end', 'on_sql_drop')`, Schema)
	}
	if n := calls(); n != 0 {
		t.Errorf("a fresh install ran the event triggers %d times, want none", n)
	}
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY)", "INSERT INTO k VALUES (1)")
	if n := calls(); n == 0 {
		t.Error("CREATE TABLE after the install ran no event trigger")
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE oid = 'k'::regclass"); got != 1 {
		t.Errorf("k in the catalog %d times, want 1", got)
	}
	if got := queryText(t, conn, "SHOW session_replication_role"); got != "origin" {
		t.Errorf("session_replication_role %q after the install, want origin", got)
	}
}
