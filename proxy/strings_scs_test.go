package proxy

import "testing"

func TestBackslashInPlainString(t *testing.T) {
	for sql, want := range map[string]bool{
		`SELECT 'a\b'`:                       true,
		`SELECT n'a\b'`:                      true,
		`SELECT U&'\00e9'`:                   true,
		`SELECT 'it''s' || 'x\'`:             true,
		`SELECT E'a\'b'`:                     false,
		`SELECT e'a\\' || 'b'`:               false,
		`SELECT E'a\'' || 'b\'`:              true,
		`SELECT $$a\b$$, $q$ ' \ $q$`:        false,
		`SELECT "a\b" FROM t`:                false,
		`SELECT 1 -- 'a\b'`:                  false,
		`SELECT /* /* 'a\b' */ */ 1`:         false,
		`SELECT /* /* */ 'a\b' */ 1`:         false,
		`SELECT /* */ 'a\b'`:                 true,
		`SELECT $1, x$y FROM t WHERE v='\'`:  true,
		`SELECT some'a\b'`:                   true,
		`SELECT abc$$ 'a\b'`:                 true,
		`SELECT 'unterminated \`:             true,
		`SELECT 'plain', E'\n', $$'$$, '\x'`: true,
		`SELECT 'plain', E'\n', $$'$$`:       false,
	} {
		if got := backslashInPlainString(sql); got != want {
			t.Errorf("backslashInPlainString(%q) = %v, want %v", sql, got, want)
		}
	}
}
