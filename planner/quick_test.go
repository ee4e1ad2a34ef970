package planner

import "testing"

func TestPlainRead(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 42;", true},
		{"  select 1", true},
		{"VALUES (1), (2)", true},
		{"TABLE t", true},
		{"(SELECT 1) UNION (SELECT 2)", true},
		{"WITH x AS (SELECT 1) SELECT * FROM x", true},
		{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", false},
		{"SELECT * INTO t2 FROM t", false},
		{"SELECT * FROM t AS OF 5", false},
		{"SELECT mz_now()", false},
		{"SELECT 1; INSERT INTO t VALUES (1)", false},
		{"SELECT 1; SELECT 2", false},
		{"SELECT 1; SHOW transaction_isolation", false},
		{"SELECT ';'", false},
		{"SELECT * FROM t FOR UPDATE", false},
		{"-- comment\nSELECT 1", false},
		{"/* c */ SELECT 1", false},
		{"INSERT INTO t VALUES (1)", false},
		{"EXPLAIN SELECT 1", false},
		{"SHOW x", false},
		{"", false},
		{"   ", false},
		{";", false},
		{"SELECT 'insert'", false}, // conservative: words inside literals count
		{"SELECT offset_x, profile FROM t", true},
		{"SÉLECT 1", false},
	} {
		if got := PlainRead(tc.sql); got != tc.want {
			t.Errorf("PlainRead(%q) = %v, want %v", tc.sql, got, tc.want)
		}
	}
}

func BenchmarkPlainRead(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		PlainRead("SELECT abalance FROM pgbench_accounts WHERE aid = 42;")
	}
}
