package proxy

import (
	"strings"
	"testing"

	"github.com/mzproxy/mzproxy/planner"
)

// TestPlainReadRemembersLastAnswer: the session's plainRead answers as
// planner.PlainRead does for every text, also when texts alternate and
// when an equal text comes in another string.
func TestPlainReadRemembersLastAnswer(t *testing.T) {
	s := &Session{}
	texts := []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		"UPDATE pgbench_accounts SET abalance = 1 WHERE aid = $1",
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		strings.Clone("SELECT abalance FROM pgbench_accounts WHERE aid = $1"),
		"select 1; select 2",
		"select mz_now()",
		"",
		"with x as (select 1) select * from x",
		"with x as (delete from t returning 1) select * from x",
	}
	for round := 0; round < 2; round++ {
		for _, sql := range texts {
			for range 2 {
				if got, want := s.plainRead(sql), planner.PlainRead(sql); got != want {
					t.Fatalf("plainRead(%q) = %v, planner.PlainRead says %v", sql, got, want)
				}
			}
		}
	}
}
