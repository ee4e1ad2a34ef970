package planner

import "testing"

func TestContainsAnyFold(t *testing.T) {
	for _, c := range []struct {
		s     string
		words []string
		want  bool
	}{
		{"SELECT * FROM Public.T", []string{"public"}, true},
		{"SET SEARCH_PATH = x", []string{"reset", "search_path"}, true},
		{"select 1", []string{"search_path"}, false},
		{`SELECT "Éx".a FROM t`, []string{asciiLower("Éx")}, true},
		{"sea", []string{"search_path"}, false},
		{"", []string{"a"}, false},
	} {
		if got := ContainsAnyFold(c.s, c.words...); got != c.want {
			t.Errorf("ContainsAnyFold(%q, %q) = %v", c.s, c.words, got)
		}
	}
}
