package storage

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pinGuardCheckSQL reads PinGuardCheck as the read-only transaction's
// guard does: P when it holds for peek, NULL otherwise.
func pinGuardCheckSQL(peek string) string {
	return "SELECT CASE WHEN " + PinGuardCheck(peek) + " THEN " + PinGuardTS + " END" + PinGuardFrom
}

// PinGuardCheck (version 32), read by an ordinary role, answers what
// pin_check answers in every state of the sequences: after a pin, with a
// write in progress, after a write no pin settled, after the pin that
// settled it, and with P more than a second behind the clock; for the
// right peek, an older one and NULL.
func TestPinGuardCheckAsFunction(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzpinseq; CREATE ROLE mzpinseq LOGIN"); err != nil {
		t.Fatal(err)
	}
	role := connect(t, server.ConnString("mzpinseq", conn.Config().Database))
	// A search_path with the role's own schema first cannot change what
	// the operators are.
	if _, err := role.Exec(ctx, "SET search_path = public, pg_catalog"); err != nil {
		t.Fatal(err)
	}
	// The states where P is fresh hold only while P is less than a
	// second behind the clock: on a loaded machine a state's checks (a
	// dozen round trips) can outlast that second, and the answers then
	// change under them, both at once. Such a run of the states says
	// nothing and is made again; every run in which P stayed fresh must
	// agree in full.
	for attempt := 1; ; attempt++ {
		if !pinGuardStates(t, conn, role) {
			return
		}
		if attempt == 5 {
			t.Fatal("P fell a second behind the clock during the checks of a state in every one of 5 runs")
		}
		t.Logf("run %d: P fell a second behind the clock during a state's checks (a loaded machine); again", attempt)
	}
}

// pinGuardStates is one run of TestPinGuardCheckAsFunction's states; it
// reports whether P fell a second behind the clock in one where it must
// be fresh (its answers then say nothing).
func pinGuardStates(t *testing.T, conn, role *pgx.Conn) (stale bool) {
	t.Helper()
	ctx := context.Background()
	check := func(sql string) *int64 {
		tx, err := role.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		return nullableInt(t, tx, sql)
	}
	pAge := func() int64 {
		return queryInt(t, conn, "SELECT "+Schema+".now_ms() - last_value FROM "+Schema+".pinned")
	}
	// same compares the two for each peek, then the check for the count
	// with wantP; false when P was stale by the end in a fresh state.
	same := func(state string, wantP bool) bool {
		t.Helper()
		peek := queryInt(t, conn, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+Schema+".writes")
		var mismatch string
		for _, peek := range []string{fmt.Sprint(peek), fmt.Sprint(peek - 1), "NULL"} {
			fn := check("SELECT " + Schema + ".pin_check(" + peek + ")")
			guard := check(pinGuardCheckSQL(peek + "::int8"))
			if fmt.Sprint(deref(guard)) != fmt.Sprint(deref(fn)) && mismatch == "" {
				mismatch = fmt.Sprintf("%s, peek %s: PinGuardCheck = %v, pin_check() = %v", state, peek, deref(guard), deref(fn))
			}
		}
		p := check(pinGuardCheckSQL(fmt.Sprint(peek)))
		if wantP && pAge() >= 1000 {
			return false
		}
		if mismatch != "" {
			t.Fatal(mismatch)
		}
		if (p != nil) != wantP {
			t.Fatalf("%s: PinGuardCheck for the count = %v, want P: %v", state, deref(p), wantP)
		}
		return true
	}

	queryInt(t, conn, ReadTSSQL)
	if !same("after a pin", true) {
		return true
	}
	w := beginLazy(t, conn)
	defer w.Rollback(ctx) // a stale run's write; a no-op after its commit
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if !same("with a write in progress", true) {
		return true
	}
	commitLazy(t, w)
	if !same("after a write no pin settled", true) {
		return true
	}
	queryInt(t, conn, ReadTSSQL)
	if !same("after the pin that settled it", true) {
		return true
	}
	queryInt(t, conn, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms() - 2000)")
	same("with P behind the clock", false)
	return false
}

// TestUpgradeToVersion32: an ordinary role may read the sequences pinned
// and writes after the upgrade (not before), and still may not move them
// (writes_seen it may read since version 45: TestUpgradeToVersion45).
func TestUpgradeToVersion32(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 31)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzpinseq32; CREATE ROLE mzpinseq32 LOGIN"); err != nil {
		t.Fatal(err)
	}
	role := connect(t, server.ConnString("mzpinseq32", conn.Config().Database))
	code := func(sql string) string {
		t.Helper()
		var pe *pgconn.PgError
		if _, err := role.Exec(ctx, sql); errors.As(err, &pe) {
			return pe.Code
		} else if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return ""
	}
	for _, sql := range []string{"SELECT last_value FROM " + Schema + ".pinned", "SELECT last_value FROM " + Schema + ".writes"} {
		if c := code(sql); c != "42501" {
			t.Fatalf("before the upgrade, %s: %q, want 42501", sql, c)
		}
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if c := code("SELECT p.last_value, w.last_value FROM " + Schema + ".pinned p, " + Schema + ".writes w"); c != "" {
		t.Fatalf("after the upgrade, reading the sequences: %q", c)
	}
	for _, sql := range []string{
		"SELECT nextval('" + Schema + ".pinned')", "SELECT nextval('" + Schema + ".writes')",
		"SELECT setval('" + Schema + ".pinned', 1)", "SELECT setval('" + Schema + ".writes', 1)",
	} {
		if c := code(sql); c != "42501" {
			t.Errorf("%s: %q, want 42501", sql, c)
		}
	}
	if c := code(pinGuardCheckSQL("0")); c != "" {
		t.Fatalf("PinGuardCheck after the upgrade: %q", c)
	}
}
