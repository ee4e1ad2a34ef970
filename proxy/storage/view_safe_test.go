package storage

import (
	"context"
	"strings"
	"testing"
)

// viewReadersSQL lists mzproxy's functions whose body names a view of its
// schema, and whether the function's SET clause lifts
// restrict_nonsystem_relation_kind.
const viewReadersSQL = `
SELECT p.oid::regprocedure::text,
       coalesce('restrict_nonsystem_relation_kind=' = ANY (p.proconfig), false)
  FROM pg_proc p
 WHERE p.pronamespace = '` + Schema + `'::regnamespace
   AND EXISTS (SELECT 1 FROM pg_class v
                WHERE v.relnamespace = '` + Schema + `'::regnamespace AND v.relkind = 'v'
                  AND p.prosrc ~ ('\m' || v.relname || '\M'))
 ORDER BY 1`

// A session may restrict non-system views (SET
// restrict_nonsystem_relation_kind = 'view', as pg_dump 15.8+ does):
// every function of mzproxy's that reads a view of its schema lifts the
// restriction in its SET clause (view_safe.sql), so pin(), and through it
// EXPLAIN TIMESTAMP, reads in a block and AS OF mz_now(), answer in such a
// session as in any other. A function a later version defines again must
// keep it: this test names it.
func TestViewReadersLiftRestriction(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	rows, err := conn.Query(ctx, viewReadersSQL)
	if err != nil {
		t.Fatal(err)
	}
	var readers, unsafe []string
	for rows.Next() {
		var name string
		var lifted bool
		if err := rows.Scan(&name, &lifted); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, name)
		if !lifted {
			unsafe = append(unsafe, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(unsafe) > 0 {
		t.Fatalf("functions that read a view of %s without SET restrict_nonsystem_relation_kind = '': %s", Schema, strings.Join(unsafe, ", "))
	}
	if len(readers) == 0 {
		t.Fatal("no function reads a view: the query found nothing to check")
	}

	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzviewsafe; CREATE ROLE mzviewsafe LOGIN"); err != nil {
		t.Fatal(err)
	}
	role := connect(t, server.ConnString("mzviewsafe", conn.Config().Database))
	if _, err := role.Exec(ctx, "SET restrict_nonsystem_relation_kind = 'view'"); err != nil {
		t.Fatal(err)
	}
	if _, err := role.Exec(ctx, "SELECT t FROM "+Schema+".settled_pin"); err == nil || !strings.Contains(err.Error(), "is restricted") {
		t.Fatalf("the view read under the restriction: %v", err)
	}
	p := queryInt(t, role, ReadTSSQL)
	if again := queryInt(t, role, ReadTSSQL); again < p {
		t.Fatalf("pin() went back from %d to %d", p, again)
	}
	var shown string
	if err := role.QueryRow(ctx, "SHOW restrict_nonsystem_relation_kind").Scan(&shown); err != nil || shown != "view" {
		t.Fatalf("the session's setting after pin() = %q, %v; want view", shown, err)
	}
}
