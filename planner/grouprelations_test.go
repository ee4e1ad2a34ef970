package planner

import (
	"slices"
	"strings"
	"testing"
)

// TestGroupRelations: the writes another connection may run for a
// session (group commit), and the relations each names, target first.
func TestGroupRelations(t *testing.T) {
	for sql, want := range map[string]string{
		"INSERT INTO t VALUES (1)":                                   "t",
		"insert into S.T values (1, 'a'), (2, DEFAULT)":              "s.t",
		`INSERT INTO "My T" (a, b) VALUES (-1, '2'::date)`:           `"My T"`,
		"INSERT INTO t VALUES (NULL, 1.5, true)":                     "t",
		"INSERT INTO t SELECT x FROM u WHERE x > 1":                  "t,u",
		"UPDATE counter SET v = v + 1 WHERE id = 1":                  "counter",
		"UPDATE t SET v = u.v FROM u WHERE t.id = u.id":              "t,u",
		"UPDATE t SET v = (SELECT v FROM s.u LIMIT 1)":               "t,s.u",
		"UPDATE t SET v = (SELECT max(v) FROM u)":                    "",
		"DELETE FROM t WHERE x = 1":                                  "t",
		"DELETE FROM t USING u WHERE t.x = u.x":                      "t,u",
		"INSERT INTO t VALUES (now())":                               "",
		"UPDATE t SET at = current_timestamp":                        "",
		"DELETE FROM t WHERE x IN (SELECT f(y) FROM u)":              "",
		"UPDATE t SET v = 1 RETURNING v":                             "",
		"DELETE FROM t RETURNING *":                                  "",
		"INSERT INTO t VALUES (1) RETURNING *":                       "",
		"INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING":            "",
		"WITH x AS (SELECT 1) INSERT INTO t VALUES (1)":              "",
		"INSERT INTO t DEFAULT VALUES":                               "",
		"INSERT INTO db.s.t VALUES (1)":                              "",
		"INSERT INTO t SELECT * FROM generate_series(1, 3)":          "",
		"INSERT INTO t VALUES ($1)":                                  "",
		"INSERT INTO t VALUES (nextval('s'))":                        "",
		"MERGE INTO t USING u ON t.x = u.x WHEN MATCHED THEN DELETE": "",
		"SELECT 1": "",
	} {
		stmts, err := New(0).Plan(sql, newFakeCatalog(), Options{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var w []string
		if want != "" {
			w = strings.Split(want, ",")
		}
		if got := stmts[0].GroupRelations; !slices.Equal(got, w) {
			t.Errorf("%s: GroupRelations %q, want %q", sql, got, w)
		}
	}
}
