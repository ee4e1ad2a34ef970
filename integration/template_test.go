package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The template database (proxy/template.go): a client's CREATE DATABASE
// through mzproxy copies mzproxy_template, a copy of template1 with the
// schema installed, and the copy computes its own write key and clock.
// On a private PostgreSQL: the test changes template1.

const templateName = "mzproxy_template"

// templateComment is the template's record of its source, "" while there
// is no template.
func templateComment(t *testing.T, ctx context.Context, direct *pgx.Conn) string {
	t.Helper()
	var c string
	err := direct.QueryRow(ctx, `SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database
  WHERE datname = $1 AND datistemplate AND NOT datallowconn`, templateName).Scan(&c)
	if err == pgx.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitTemplate waits until the template exists with a record other
// than old.
func awaitTemplate(t *testing.T, ctx context.Context, direct *pgx.Conn, old string) string {
	t.Helper()
	var c string
	eventually(t, 60*time.Second, "the template database is made", func() bool {
		c = templateComment(t, ctx, direct)
		return c != "" && c != old
	})
	return c
}

// hasRelation reports whether database db (connected to directly, so
// before any proxy registers there) has relation name.
func hasRelation(t *testing.T, ctx context.Context, pg *privateCluster, db, name string) bool {
	t.Helper()
	conn := connectTo(t, ctx, pg.srv.ConnString("", db))
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// copyValues are a database's install-time values, read directly.
type copyValues struct {
	key      string
	readTS   int64
	pinned   int64
	upper    int64
	schema   string // the schema's owner and ACL
	dbOwner  string
	template bool // still marked as a copy
}

func readCopyValues(t *testing.T, ctx context.Context, pg *privateCluster, db string) copyValues {
	t.Helper()
	conn := connectTo(t, ctx, pg.srv.ConnString("", db))
	defer conn.Close(ctx)
	var v copyValues
	if err := conn.QueryRow(ctx, `SELECT (SELECT k FROM mzproxy.write_key), (SELECT read_ts FROM mzproxy.oracle),
  (SELECT last_value FROM mzproxy.pinned), (SELECT upper FROM mzproxy.txns_durable),
  (SELECT nspowner::regrole::text || ' ' || coalesce(nspacl::text, '') FROM pg_namespace WHERE nspname = 'mzproxy'),
  (SELECT datdba::regrole::text FROM pg_database WHERE datname = current_database()),
  to_regclass('mzproxy.template_copy') IS NOT NULL`).Scan(&v.key, &v.readTS, &v.pinned, &v.upper, &v.schema, &v.dbOwner, &v.template); err != nil {
		t.Fatal(err)
	}
	return v
}

// useDatabase runs a managed table's statements in db through p.
func useDatabase(t *testing.T, ctx context.Context, p *proxyProc, user, db string) {
	t.Helper()
	conn := connectTo(t, ctx, p.URL(user, db))
	defer conn.Close(ctx)
	mustExec(t, ctx, conn, "CREATE TABLE used (x int PRIMARY KEY)", "INSERT INTO used VALUES (1)", "UPDATE used SET x = 2")
	if n := count(t, ctx, conn, "SELECT x FROM used", pgx.QueryExecModeSimpleProtocol); n != 2 {
		t.Errorf("%s: read %d, want 2", db, n)
	}
}

func nowMS() int64 { return time.Now().UnixMilli() }

func TestTemplateDatabase(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")

	// A database of the template's name that a superuser does not own is
	// never copied (nor replaced).
	maker := connectTo(t, ctx, pg.srv.ConnString("maker", "postgres"))
	mustExec(t, ctx, maker, "CREATE DATABASE "+templateName)
	squat := connectTo(t, ctx, pg.srv.ConnString("maker", templateName))
	mustExec(t, ctx, squat, "CREATE TABLE planted (x int)")
	squat.Close(ctx)
	mustExec(t, ctx, maker, "ALTER DATABASE "+templateName+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
		"COMMENT ON DATABASE "+templateName+" IS 'mzproxy storage 1'")

	p := startProxy(t, "--backend", pg.url())
	admin := connectTo(t, ctx, p.URL("postgres", "postgres"))
	mustExec(t, ctx, admin, "CREATE DATABASE squatted")
	if hasRelation(t, ctx, pg, "squatted", "planted") || hasRelation(t, ctx, pg, "squatted", "mzproxy.schema_version") {
		t.Fatal("a CREATE DATABASE through mzproxy copied a database of the template's name that another role made")
	}
	mustExec(t, ctx, maker, "ALTER DATABASE "+templateName+" WITH IS_TEMPLATE false", "DROP DATABASE "+templateName)
	maker.Close(ctx)

	// The first CREATE DATABASE copies template1 and makes the template.
	mustExec(t, ctx, admin, "CREATE DATABASE first")
	source := awaitTemplate(t, ctx, direct, "")

	// The template is compacted after the install (every CREATE DATABASE
	// copies each of its blocks): not much larger than template1, where
	// the install left it 1.1 MB larger (8.6 MB).
	var templateSize, template1Size int64
	if err := direct.QueryRow(ctx, "SELECT pg_catalog.pg_database_size($1), pg_catalog.pg_database_size('template1')",
		templateName).Scan(&templateSize, &template1Size); err != nil {
		t.Fatal(err)
	}
	if templateSize > template1Size+512<<10 {
		t.Fatalf("the template is %d bytes, template1 %d: not compacted", templateSize, template1Size)
	}

	t.Run("copies", func(t *testing.T) {
		before := nowMS()
		mustExec(t, ctx, admin, "CREATE DATABASE copy_a", "CREATE DATABASE copy_b WITH OWNER = maker ENCODING 'UTF8'")
		for _, db := range []string{"copy_a", "copy_b"} {
			if !hasRelation(t, ctx, pg, db, "mzproxy.template_copy") {
				t.Fatalf("%s is not a copy of the template", db)
			}
		}
		a0 := readCopyValues(t, ctx, pg, "copy_a")
		useDatabase(t, ctx, p, "postgres", "copy_a")
		useDatabase(t, ctx, p, "postgres", "copy_b")
		// The first session registered the proxy once in each copy (its
		// lease registers while the session's backend starts).
		for _, db := range []string{"copy_a", "copy_b"} {
			conn := connectTo(t, ctx, pg.srv.ConnString("", db))
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM mzproxy.incarnations").Scan(&n); err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx)
			if n != 1 {
				t.Errorf("%s: %d incarnations registered, want 1", db, n)
			}
		}
		a, b := readCopyValues(t, ctx, pg, "copy_a"), readCopyValues(t, ctx, pg, "copy_b")
		if a.template || b.template {
			t.Errorf("still marked as copies after mzproxy used them: %v %v", a.template, b.template)
		}
		if a.key == b.key || a.key == a0.key {
			t.Errorf("write keys: copy_a %q (the template's %q), copy_b %q: each copy needs its own", a.key, a0.key, b.key)
		}
		for _, v := range []copyValues{a, b} {
			if v.readTS < before || v.pinned < before || v.upper <= before {
				t.Errorf("clock of a copy made after %d: oracle %d, pinned %d, upper %d (the template's: %d)", before, v.readTS, v.pinned, v.upper, a0.readTS)
			}
		}
		if b.dbOwner != "maker" || a.dbOwner != "postgres" {
			t.Errorf("owners: copy_a %q, copy_b %q", a.dbOwner, b.dbOwner)
		}
	})

	t.Run("explicit template", func(t *testing.T) {
		mustExec(t, ctx, admin, "CREATE DATABASE from_zero TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'",
			"CREATE DATABASE from_one WITH TEMPLATE = template1")
		for _, db := range []string{"from_zero", "from_one"} {
			if hasRelation(t, ctx, pg, db, "mzproxy.schema_version") {
				t.Errorf("%s: a client's own TEMPLATE got the template database", db)
			}
			useDatabase(t, ctx, p, "postgres", db)
		}
	})

	t.Run("ordinary role", func(t *testing.T) {
		conn := connectTo(t, ctx, p.URL("maker", "postgres"))
		mustExec(t, ctx, conn, "CREATE DATABASE by_maker")
		conn.Close(ctx)
		if !hasRelation(t, ctx, pg, "by_maker", "mzproxy.template_copy") {
			t.Fatal("by_maker is not a copy of the template")
		}
		useDatabase(t, ctx, p, "maker", "by_maker")
		m, installed := readCopyValues(t, ctx, pg, "by_maker"), readCopyValues(t, ctx, pg, "from_one")
		if m.dbOwner != "maker" || m.schema != installed.schema {
			t.Errorf("by_maker: owner %q, schema %q; a database maker made that mzproxy installed: schema %q", m.dbOwner, m.schema, installed.schema)
		}
		// The template stays mzproxy's: maker may copy it (as template1),
		// and change nothing of it.
		var codes []string
		for _, db := range []string{"from_one", "by_maker"} {
			c := connectTo(t, ctx, pg.srv.ConnString("maker", db))
			_, err := c.Exec(ctx, "SELECT k FROM mzproxy.write_key")
			codes = append(codes, sqlState(err))
		}
		if codes[0] == "" || codes[1] != codes[0] {
			t.Errorf("maker reading the write key: %q in a database mzproxy installed, %q in a copy", codes[0], codes[1])
		}
		mk := connectTo(t, ctx, pg.srv.ConnString("maker", "by_maker"))
		for _, sql := range []string{
			"ALTER DATABASE " + templateName + " WITH ALLOW_CONNECTIONS true",
			"ALTER DATABASE " + templateName + " RENAME TO stolen",
			"COMMENT ON DATABASE " + templateName + " IS 'x'",
			"DROP DATABASE " + templateName,
		} {
			_, err := mk.Exec(ctx, sql)
			wantCode(t, err, "42501")
		}
		_, err := pgx.Connect(ctx, pg.srv.ConnString("maker", templateName))
		wantCode(t, err, "55000") // database does not allow connections
	})

	t.Run("template1 changed", func(t *testing.T) {
		stats := func() string {
			var s string
			if err := direct.QueryRow(ctx, "SELECT xact_commit::text FROM pg_stat_database WHERE datname = 'template1'").Scan(&s); err != nil {
				t.Fatal(err)
			}
			_, _ = direct.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
			return s
		}
		was := stats()
		t1 := connectTo(t, ctx, pg.srv.ConnString("", "template1"))
		mustExec(t, ctx, t1, "CREATE TABLE added_to_template1 (x int)")
		t1.Close(ctx)
		eventually(t, 30*time.Second, "template1's statistics show the change", func() bool {
			var n int
			if err := direct.QueryRow(ctx, "SELECT numbackends FROM pg_stat_database WHERE datname = 'template1'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0 && stats() != was
		})
		mustExec(t, ctx, admin, "CREATE DATABASE after_change")
		if !hasRelation(t, ctx, pg, "after_change", "added_to_template1") {
			t.Error("a database made after template1 changed lacks template1's new table")
		}
		awaitTemplate(t, ctx, direct, source)
		mustExec(t, ctx, admin, "CREATE DATABASE rebuilt")
		if !hasRelation(t, ctx, pg, "rebuilt", "added_to_template1") || !hasRelation(t, ctx, pg, "rebuilt", "mzproxy.template_copy") {
			t.Error("the template made again is not template1's new content with the schema")
		}
		useDatabase(t, ctx, p, "postgres", "rebuilt")
		eventually(t, 30*time.Second, "no database of an earlier template left", func() bool {
			var leftovers int
			if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE 'mzproxy_template_%'").Scan(&leftovers); err != nil {
				t.Fatal(err)
			}
			return leftovers == 0
		})
	})

	t.Run("55006", func(t *testing.T) {
		// A session left on the template (a superuser let one in): a copy
		// fails with 55006 after PostgreSQL's 5 s wait; the client's own
		// statement then runs, copying template1.
		mustExec(t, ctx, direct, "ALTER DATABASE "+templateName+" WITH ALLOW_CONNECTIONS true")
		on := connectTo(t, ctx, pg.srv.ConnString("", templateName))
		mustExec(t, ctx, direct, "ALTER DATABASE "+templateName+" WITH ALLOW_CONNECTIONS false")
		mustExec(t, ctx, admin, "CREATE DATABASE while_busy")
		on.Close(ctx)
		if hasRelation(t, ctx, pg, "while_busy", "mzproxy.template_copy") {
			t.Error("while_busy is a copy of the template")
		}
		useDatabase(t, ctx, p, "postgres", "while_busy")
	})

	t.Run("two proxies", func(t *testing.T) {
		// template1 changes again, so both proxies also make the template
		// while their clients make databases.
		t1 := connectTo(t, ctx, pg.srv.ConnString("", "template1"))
		mustExec(t, ctx, t1, "DROP TABLE added_to_template1")
		t1.Close(ctx)
		q := startProxy(t, "--backend", pg.url())
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i, proxy := range []*proxyProc{p, q, p, q} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := pgx.Connect(ctx, proxy.URL("postgres", "postgres"))
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close(context.Background())
				for j := range 4 {
					if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE par_%d_%d", i, j)); err != nil {
						errs <- fmt.Errorf("par_%d_%d: %w", i, j, err)
					}
					time.Sleep(300 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range 4 {
			useDatabase(t, ctx, q, "postgres", fmt.Sprintf("par_%d_3", i))
		}
	})
}
