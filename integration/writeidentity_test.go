package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestWriteIdentity plays the attacker of security issue #13 item 2 on
// every write path: an ordinary role's CHECK constraint calls her own
// PL/pgSQL function, which records session_user and current_user and
// tries `RESET ROLE; ALTER ROLE <herself> SUPERUSER` (the error caught so
// the write goes on). Every write must run in her own backend session:
// the function sees her as session_user and current_user, and the
// escalation fails, whether the write is an autocommit INSERT over the
// simple or the extended protocol, an INSERT in a transaction block or an
// autocommit UPDATE.
func TestWriteIdentity(t *testing.T) {
	ctx := testContext(t)
	const role = "wi_alice"
	admin := connectDirect(t, ctx)
	passwordRole(t, ctx, role, "unused", "")
	// After the database (cleanups run last first): she owns objects in it.
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	db := freshDatabase(t, ctx)
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, direct, "GRANT CREATE ON SCHEMA public TO "+role)

	p := startProxy(t)
	alice := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, alice,
		"CREATE TABLE seen (path text NOT NULL, session_name name NOT NULL, current_name name NOT NULL)",
		`CREATE FUNCTION escalate(path text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO seen VALUES (path, session_user, current_user);
	BEGIN
		RESET ROLE;
		ALTER ROLE `+role+` SUPERUSER;
	EXCEPTION WHEN insufficient_privilege THEN
		NULL;
	END;
	RETURN true;
END$$`,
		"CREATE TABLE target (id int PRIMARY KEY, path text NOT NULL CHECK (escalate(path)))")

	paths := []struct {
		path  string
		write func() error
	}{
		{"simple insert", func() error {
			_, err := execSimple(ctx, alice, "INSERT INTO target VALUES (1, 'simple insert')")
			return err
		}},
		{"extended insert", func() error {
			_, err := alice.Exec(ctx, "INSERT INTO target VALUES ($1, $2)", 2, "extended insert")
			return err
		}},
		{"insert in a block", func() error {
			_, err := execSimple(ctx, alice, "BEGIN; INSERT INTO target VALUES (3, 'insert in a block'); COMMIT")
			return err
		}},
		{"update", func() error {
			_, err := execSimple(ctx, alice, "UPDATE target SET path = 'update' WHERE id = 1")
			return err
		}},
	}
	type identity struct{ Session, Current string }
	for _, w := range paths {
		if err := w.write(); err != nil {
			t.Errorf("%s: %v", w.path, err)
			continue
		}
		var super bool
		if err := direct.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
			t.Fatal(err)
		}
		if super {
			t.Errorf("%s: %s became superuser from her CHECK constraint's function", w.path, role)
			// Each path on its own: take the escalation back.
			mustExec(t, ctx, direct, "ALTER ROLE "+role+" NOSUPERUSER")
		}
		rows, err := direct.Query(ctx, "SELECT session_name, current_name FROM seen WHERE path = $1", w.path)
		if err != nil {
			t.Fatal(err)
		}
		seen, err := pgx.CollectRows(rows, pgx.RowToStructByPos[identity])
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) == 0 {
			t.Errorf("%s: the CHECK constraint's function recorded nothing", w.path)
		}
		for _, s := range seen {
			if s != (identity{role, role}) {
				t.Errorf("%s: the CHECK constraint ran with session_user %s, current_user %s; want %s for both", w.path, s.Session, s.Current, role)
			}
		}
	}
}
