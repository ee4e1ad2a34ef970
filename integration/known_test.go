package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// What the proxy knows of a session without asking (proxy/known.go): a
// read-only transaction's isolation level and read-only mode, guessed from
// its BEGIN and the session's defaults and checked in the pin's own round
// trip; and the search_path, forgotten whenever a statement may change it.

// TestTxnCharacteristicsKnown: a default changed where the proxy cannot
// see it (a function that runs SET) fails the next read-only transaction
// with 40001 instead of running it at another level than the client's;
// the transaction after it runs at the new level. A change the proxy sees
// (SET SESSION CHARACTERISTICS, SET default_transaction_*) takes effect at
// once, as in PostgreSQL.
func TestTxnCharacteristicsKnown(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE kt (x int)", "INSERT INTO kt VALUES (1)",
		// Their calls name no setting: the proxy cannot tell what they change.
		`CREATE FUNCTION quietly_serializable() RETURNS void LANGUAGE plpgsql
		 AS $$BEGIN SET default_transaction_isolation = serializable; END$$`,
		`CREATE FUNCTION quietly_read_only() RETURNS void LANGUAGE plpgsql
		 AS $$BEGIN SET default_transaction_read_only = on; END$$`)
	level := "SELECT current_setting('transaction_isolation') || ' ' || current_setting('transaction_read_only') FROM kt LIMIT 1"
	for _, qm := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(qm.String(), func(t *testing.T) {
			inTxn := func(want string) {
				t.Helper()
				mustExec(t, ctx, a, "BEGIN")
				var got string
				if err := a.QueryRow(ctx, level, qm).Scan(&got); err != nil || got != want {
					t.Fatalf("in the transaction: %q, %v; want %q", got, err, want)
				}
				mustExec(t, ctx, a, "COMMIT")
			}
			failsInTxn := func(code string) {
				t.Helper()
				mustExec(t, ctx, a, "BEGIN")
				var got string
				err := a.QueryRow(ctx, level, qm).Scan(&got)
				mustExec(t, ctx, a, "ROLLBACK")
				wantCode(t, err, code)
			}
			mustExec(t, ctx, a, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE")
			inTxn("repeatable read off") // learns the defaults
			inTxn("repeatable read off") // one round trip
			mustExec(t, ctx, a, "SELECT quietly_serializable()")
			failsInTxn("40001")
			inTxn("serializable off")
			inTxn("serializable off")
			mustExec(t, ctx, a, "SELECT quietly_read_only()")
			failsInTxn("40001")
			inTxn("serializable on")
			mustExec(t, ctx, a, "BEGIN")
			if _, err := execAs(ctx, a, qm, "SELECT x FROM kt"); err != nil {
				t.Fatal(err)
			}
			_, err := execAs(ctx, a, qm, "INSERT INTO kt VALUES (2)")
			wantCode(t, err, "25006") // the client's READ ONLY holds after the pin
			mustExec(t, ctx, a, "ROLLBACK")
			// Changes the proxy sees need no retry.
			mustExec(t, ctx, a, "SET default_transaction_read_only = off")
			inTxn("serializable off")
			mustExec(t, ctx, a, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
			inTxn("repeatable read off")
			mustExec(t, ctx, a, "BEGIN READ ONLY")
			var got string
			if err := a.QueryRow(ctx, level, qm).Scan(&got); err != nil || got != "repeatable read on" {
				t.Fatalf("BEGIN READ ONLY: %q, %v", got, err)
			}
			mustExec(t, ctx, a, "COMMIT")
		})
	}
}

// TestSearchPathKnown: reads the proxy resolves itself (mz_now()) follow
// every change of the search_path, also one undone at the end of a block.
func TestSearchPathKnown(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE SCHEMA other", "CREATE TABLE other.sp (v text)", "INSERT INTO other.sp VALUES ('other')",
		"CREATE TABLE public.sp (v text)", "INSERT INTO public.sp VALUES ('public')")
	read := func(want string) {
		t.Helper()
		var got string
		var ts int64
		if err := a.QueryRow(ctx, "SELECT v, mz_now() FROM sp", pgx.QueryExecModeSimpleProtocol).Scan(&got, &ts); err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	read("public")
	read("public")
	mustExec(t, ctx, a, "SET search_path = other, public")
	read("other")
	mustExec(t, ctx, a, "BEGIN", "SET LOCAL search_path = public")
	read("public")
	mustExec(t, ctx, a, "COMMIT")
	read("other")
	mustExec(t, ctx, a, "BEGIN", "SET search_path = public")
	read("public")
	mustExec(t, ctx, a, "ROLLBACK")
	read("other")
	mustExec(t, ctx, a, "RESET search_path")
	read("public")
}
