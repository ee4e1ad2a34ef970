package planner

import "testing"

// TestBlindInsert: the writes another connection may run for a session
// (group commit), and the table each names.
func TestBlindInsert(t *testing.T) {
	for sql, want := range map[string]string{
		"INSERT INTO t VALUES (1)":                         "t",
		"insert into S.T values (1, 'a'), (2, DEFAULT)":    "s.t",
		`INSERT INTO "My T" (a, b) VALUES (-1, '2'::date)`: `"My T"`,
		"INSERT INTO t VALUES (NULL, 1.5, true)":           "t",
		"INSERT INTO t VALUES (now())":                     "",
		"INSERT INTO t VALUES ((SELECT 1))":                "",
		"INSERT INTO t VALUES (1) RETURNING *":             "",
		"INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING":  "",
		"WITH x AS (SELECT 1) INSERT INTO t VALUES (1)":    "",
		"INSERT INTO t SELECT 1":                           "",
		"INSERT INTO t DEFAULT VALUES":                     "",
		"INSERT INTO db.s.t VALUES (1)":                    "",
		"INSERT INTO t VALUES (1 + 1)":                     "",
		"UPDATE t SET a = 1":                               "",
		"INSERT INTO t VALUES ($1)":                        "",
		"INSERT INTO t VALUES (nextval('s'))":              "",
	} {
		stmts, err := New(0).Plan(sql, newFakeCatalog(), Options{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if got := stmts[0].BlindInsert; got != want {
			t.Errorf("%s: BlindInsert %q, want %q", sql, got, want)
		}
	}
}
