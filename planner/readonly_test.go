package planner

import "testing"

// TestReadOnly: the statements that may begin a read-only transaction.
func TestReadOnly(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT * FROM t":                               true,
		"VALUES (1)":                                    true,
		"TABLE t":                                       true,
		"WITH x AS (SELECT 1) SELECT * FROM x":          true,
		"SELECT * FROM t AS OF 5":                       true,
		"EXPLAIN SELECT * FROM t":                       true,
		"EXPLAIN TIMESTAMP FOR SELECT * FROM t":         true,
		"DECLARE c CURSOR FOR SELECT * FROM t":          true,
		"COPY (SELECT * FROM t) TO STDOUT":              true,
		"SELECT * FROM t FOR UPDATE":                    false,
		"WITH d AS (DELETE FROM t RETURNING *) TABLE d": false,
		"SELECT * INTO u FROM t":                        false,
		"INSERT INTO t VALUES (1)":                      false,
		"EXPLAIN ANALYZE INSERT INTO t VALUES (1)":      false,
		"COPY t FROM STDIN":                             false,
		"FETCH 1 FROM c":                                false,
		"SET search_path = a":                           false,
		"SHOW search_path":                              false,
		"CREATE TABLE u (x int)":                        false,
		"BEGIN":                                         false,
	} {
		stmts, err := New(0).Plan(sql, newFakeCatalog(), Options{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if got := stmts[0].ReadOnly(); got != want {
			t.Errorf("%s: ReadOnly() = %v, want %v", sql, got, want)
		}
	}
}
