package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func wantCode(t *testing.T, err error, code string, what string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("%s: got %v, want SQLSTATE %s", what, err, code)
	}
	t.Logf("%s: %s (%s)", what, pe.Message, pe.Code)
}

func TestEventTriggers(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	rev0, err := CatalogRevision(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	t1 := inWrite(t, conn,
		`CREATE SCHEMA app`,
		`CREATE TABLE app.items (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2) DEFAULT 0, tags text[] COLLATE "C")`,
		`CREATE TABLE bag (a int, b text)`,
		`INSERT INTO bag VALUES (1, 'x'), (1, 'x'), (NULL, NULL)`,
		`CREATE TABLE copy AS SELECT * FROM bag`,
		`SELECT a INTO copy2 FROM bag WHERE a IS NOT NULL`,
		`CREATE TABLE liked (LIKE app.items INCLUDING ALL)`,
		`CREATE TEMP TABLE tmp (x int)`,
		`CREATE VIEW app.cheap AS SELECT id, name FROM app.items WHERE price < 10`,
	)
	// Directly in PostgreSQL: unmanaged, writable.
	if _, err := conn.Exec(ctx, `CREATE TABLE direct (x int); INSERT INTO direct VALUES (1); CREATE VIEW direct_v AS SELECT * FROM direct`); err != nil {
		t.Fatal(err)
	}

	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if cat.Revision <= rev0 {
		t.Errorf("revision %d not bumped from %d", cat.Revision, rev0)
	}
	var names []string
	for _, o := range cat.Objects {
		names = append(names, string(o.Kind)+":"+o.Schema+"."+o.Name)
		if o.CreatedTS != t1 {
			t.Errorf("%s created at %d, want %d", o.Name, o.CreatedTS, t1)
		}
	}
	want := []string{"table:app.items", "table:public.bag", "table:public.copy", "table:public.copy2", "table:public.liked", "view:app.cheap"}
	if !slices.Equal(names, want) {
		t.Fatalf("managed objects %v, want %v", names, want)
	}
	items := cat.ByName("app", "items")
	var cols []string
	for _, c := range items.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	if want := []string{"id integer", "name text", "price numeric(10,2)", "tags text[]"}; !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if items.History == "" || cat.ByOID(items.OID) != items || items.HistorySchema+"."+items.HistoryName != items.History {
		t.Errorf("items: %+v", items)
	}
	if v := cat.ByName("app", "cheap"); v.ViewSQL == "" || len(v.Columns) != 2 {
		t.Errorf("view: %+v", v)
	} else {
		t.Logf("view SQL: %s", v.ViewSQL)
		if n := queryInt(t, conn, "SELECT count(*) FROM ("+v.ViewSQL+") v"); n != 0 {
			t.Errorf("view SQL returns %d rows", n)
		}
	}
	// CREATE TABLE AS copied its rows into history at T.
	copyObj := cat.ByName("public", "copy")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+copyObj.History+" WHERE mz_from = $1 AND mz_to = $2", int64(t1), Infinity); n != 3 {
		t.Errorf("copy history has %d current versions, want 3", n)
	}
	// The collation of a column carries over to history.
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.attname = 'tags' AND c.collname = 'C'`, items.History); n != 1 {
		t.Errorf("history column tags lost its collation")
	}

	pinned := uint64(queryInt(t, conn, ReadTSSQL)) // commits do not move the upper; a pin does
	f, err := Frontiers(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if f.Upper != pinned+1 || pinned < t1 || len(f.Since) != 5 || f.Since[items.ID] != t1 {
		t.Errorf("frontiers %+v (T %d)", f, t1)
	}

	// Bypass protection.
	_, err = conn.Exec(ctx, `INSERT INTO app.items VALUES (1, 'a')`)
	wantCode(t, err, string(CodeWriteOutsideProxy), "direct INSERT")
	_, err = conn.Exec(ctx, `TRUNCATE bag`)
	wantCode(t, err, string(CodeWriteOutsideProxy), "direct TRUNCATE")
	_, err = conn.Exec(ctx, `ALTER TABLE bag ADD COLUMN c int`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "direct ALTER TABLE")
	_, err = conn.Exec(ctx, `DROP TABLE bag`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "direct DROP TABLE")
	_, err = conn.Exec(ctx, `DROP VIEW app.cheap`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "direct DROP VIEW")
	_, err = conn.Exec(ctx, `DROP SCHEMA app CASCADE`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "direct DROP SCHEMA CASCADE")
	// Unmanaged objects stay free.
	if _, err := conn.Exec(ctx, `INSERT INTO direct VALUES (2); ALTER TABLE direct ADD COLUMN y int; DROP VIEW direct_v; DROP TABLE direct`); err != nil {
		t.Fatal(err)
	}
	// Index maintenance and comments are fine outside the proxy.
	if _, err := conn.Exec(ctx, `CREATE INDEX bag_a ON bag (a); COMMENT ON TABLE bag IS 'a bag'; DROP INDEX bag_a`); err != nil {
		t.Fatal(err)
	}
	// The history triggers cannot be dropped, even through the proxy.
	tx, _ := conn.Begin(ctx)
	queryInt(t, tx, BeginWriteSQL)
	_, err = tx.Exec(ctx, `DROP TRIGGER mzproxy_history_ins ON bag`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "DROP TRIGGER")
	tx.Rollback(ctx)

	// Inheritance involving a managed table is refused; children of
	// unmanaged parents stay unmanaged.
	tx, _ = conn.Begin(ctx)
	queryInt(t, tx, BeginWriteSQL)
	_, err = tx.Exec(ctx, `CREATE TABLE kid () INHERITS (bag)`)
	wantCode(t, err, "0A000", "CREATE TABLE INHERITS a managed table")
	tx.Rollback(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE free_parent (x int)`); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, `CREATE TABLE free_kid () INHERITS (free_parent)`)
	if cat, _ := LoadCatalog(ctx, conn); cat.ByName("public", "free_kid") != nil {
		t.Error("child of an unmanaged parent became managed")
	}
	// DROP through the proxy keeps history and records dropped_ts.
	rev1, _ := CatalogRevision(ctx, conn)
	bag := cat.ByName("public", "bag")
	t2 := inWrite(t, conn, `DROP TABLE bag`, `DROP VIEW app.cheap`)
	var dropped int64
	if err := conn.QueryRow(ctx, "SELECT dropped_ts FROM mzproxy.catalog WHERE id = $1", bag.ID).Scan(&dropped); err != nil || uint64(dropped) != t2 {
		t.Fatalf("bag dropped_ts %d (%v), want %d", dropped, err, t2)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+bag.History+" WHERE mz_from <= $1 AND mz_to > $1", int64(t1)); n != 3 {
		t.Errorf("dropped bag's history at %d has %d rows, want 3", t1, n)
	}
	cat2, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if cat2.Revision <= rev1 || cat2.ByName("public", "bag") != nil || cat2.ByName("app", "cheap") != nil {
		t.Errorf("after DROP: revision %d (was %d), objects %d", cat2.Revision, rev1, len(cat2.Objects))
	}
	// A new table with the old name is a new object.
	inWrite(t, conn, `CREATE TABLE bag (z int)`)
	cat3, _ := LoadCatalog(ctx, conn)
	if nb := cat3.ByName("public", "bag"); nb == nil || nb.ID == bag.ID || len(nb.Columns) != 1 {
		t.Errorf("recreated bag: %+v", nb)
	}
}

func TestCatalogRenames(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, `CREATE TABLE t (a int)`, `CREATE SCHEMA s2`, `CREATE VIEW v AS SELECT a FROM t`)
	inWrite(t, conn, `ALTER TABLE t RENAME TO t2`, `ALTER TABLE t2 SET SCHEMA s2`, `ALTER VIEW v RENAME TO v2`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if cat.ByName("s2", "t2") == nil || cat.ByName("public", "v2") == nil {
		t.Fatalf("after renames: %+v %+v", cat.Objects[0], cat.Objects[1])
	}
	if v := cat.ByName("public", "v2"); v.ViewSQL == "" || !containsFold(v.ViewSQL, "s2.t2") {
		t.Errorf("view SQL after the table moved: %q", v.ViewSQL)
	}
	var stored string
	conn.QueryRow(ctx, "SELECT view_sql FROM mzproxy.catalog WHERE name = 'v2'").Scan(&stored)
	if !containsFold(stored, "s2.t2") {
		t.Errorf("stored view SQL not refreshed: %q", stored)
	}
	// CREATE OR REPLACE VIEW keeps the object and refreshes its SQL; views
	// over views are recorded too.
	v2 := cat.ByName("public", "v2")
	inWrite(t, conn, `CREATE OR REPLACE VIEW v2 AS SELECT a, a + 1 AS b FROM s2.t2`, `CREATE VIEW vv AS SELECT b FROM v2`)
	cat2, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if nv := cat2.ByName("public", "v2"); nv == nil || nv.ID != v2.ID || len(nv.Columns) != 2 || !containsFold(nv.ViewSQL, "a + 1") {
		t.Errorf("replaced view: %+v", nv)
	}
	if vv := cat2.ByName("public", "vv"); vv == nil || !containsFold(vv.ViewSQL, "public.v2") {
		t.Errorf("view over view: %+v", vv)
	}
	// The moved table is still written through its triggers.
	inWrite(t, conn, `INSERT INTO s2.t2 VALUES (1)`)
	if n := queryInt(t, conn, "SELECT count(*) FROM "+cat.ByName("s2", "t2").History); n != 1 {
		t.Errorf("history rows %d", n)
	}
}

func containsFold(s, sub string) bool {
	return len(s) >= len(sub) && (func() bool {
		for i := 0; i+len(sub) <= len(s); i++ {
			if equalFold(s[i:i+len(sub)], sub) {
				return true
			}
		}
		return false
	})()
}

func equalFold(a, b string) bool {
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// A role without superuser can create, write and (for explicit-timestamp
// reads) read the history of its tables through the proxy; SELECT grants on
// the table are mirrored on its history.
func TestNonSuperuserAndGrants(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	// Roles of this run's own: roles are the server's, and -count runs the
	// test again on it (the last run's grants keep its roles).
	n := time.Now().UnixNano()
	appRole, readerRole := fmt.Sprintf("mzapp_%d", n), fmt.Sprintf("mzreader_%d", n)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+appRole+" LOGIN; CREATE ROLE "+readerRole+" LOGIN; GRANT CREATE ON SCHEMA public TO "+appRole); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(ctx, "DROP OWNED BY "+appRole+", "+readerRole+" CASCADE")
	})
	app := connect(t, server.ConnString(appRole, db))
	reader := connect(t, server.ConnString(readerRole, db))
	ts := inWrite(t, app, `CREATE TABLE owned (id int PRIMARY KEY, v text)`, `INSERT INTO owned VALUES (1, 'a')`)
	cat, err := LoadCatalog(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	hist := cat.ByName("public", "owned").History
	histAt := "SELECT count(*) FROM " + hist + " WHERE mz_from <= $1 AND mz_to > $1"
	if n := queryInt(t, app, histAt, int64(ts)); n != 1 {
		t.Fatalf("owner reads %d history rows", n)
	}
	canRead := func() bool {
		var n int64
		return reader.QueryRow(ctx, histAt, int64(ts)).Scan(&n) == nil
	}
	if canRead() {
		t.Fatal("reader without grants can read history")
	}
	inWrite(t, app, "GRANT SELECT ON owned TO "+readerRole)
	if !canRead() {
		t.Fatal("reader with SELECT on the table cannot read history")
	}
	inWrite(t, app, "REVOKE SELECT ON owned FROM "+readerRole)
	if canRead() {
		t.Fatal("REVOKE did not reach history")
	}
	// Grants made directly in PostgreSQL are mirrored too.
	if _, err := app.Exec(ctx, "GRANT SELECT ON owned TO "+readerRole); err != nil {
		t.Fatal(err)
	}
	if !canRead() {
		t.Fatal("direct GRANT did not reach history")
	}
	// The reader cannot write around the proxy either.
	_, err = app.Exec(ctx, `UPDATE owned SET v = 'b'`)
	wantCode(t, err, string(CodeWriteOutsideProxy), "owner's direct UPDATE")
}

// TestIndexMirrors: a unique index of a managed table has a lookup mirror
// on the history table for exactly as long as the index exists, however it
// goes (DROP INDEX directly in PostgreSQL, ALTER TABLE DROP CONSTRAINT or
// DROP COLUMN through the proxy); the mirrors of a dropped table stay with
// its history table.
func TestIndexMirrors(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, `CREATE TABLE u (a int PRIMARY KEY, b int, c int, d int)`,
		`CREATE UNIQUE INDEX u_b ON u (b)`, `ALTER TABLE u ADD CONSTRAINT u_c UNIQUE (c)`, `CREATE UNIQUE INDEX u_d ON u (d)`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	u := cat.ByName("public", "u")
	mirrors := func(rel string) int64 {
		return queryInt(t, conn, `SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass AND indexrelid::regclass::text ~ '_k[0-9]+$'`, rel)
	}
	mirrorOf := func(index string) int64 {
		return queryInt(t, conn, `SELECT count(*) FROM pg_class WHERE relnamespace = 'mzproxy'::regnamespace
			AND relname = format('h%s_k%s', $1::bigint, $2::regclass::oid)`, u.ID, index)
	}
	if got := mirrors(u.History); got != 4 {
		t.Fatalf("mirrors of the primary key and three unique indexes: %d", got)
	}
	if mirrorOf("u_b") != 1 {
		t.Fatal("no mirror named after u_b")
	}
	if _, err := conn.Exec(ctx, `DROP INDEX u_b`); err != nil {
		t.Fatal(err)
	}
	if got := mirrors(u.History); got != 3 {
		t.Errorf("after DROP INDEX u_b: %d mirrors, want 3", got)
	}
	inWrite(t, conn, `ALTER TABLE u DROP CONSTRAINT u_c`)
	if got := mirrors(u.History); got != 2 {
		t.Errorf("after DROP CONSTRAINT u_c: %d mirrors, want 2", got)
	}
	inWrite(t, conn, `ALTER TABLE u DROP COLUMN d`)
	if got := mirrors(u.History); got != 1 {
		t.Errorf("after DROP COLUMN d: %d mirrors, want 1 (the primary key's)", got)
	}
	inWrite(t, conn, `DROP TABLE u`)
	if got := mirrors(u.History); got != 1 {
		t.Errorf("history of the dropped table: %d mirrors, want 1", got)
	}
}
