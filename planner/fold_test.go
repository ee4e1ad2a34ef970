package planner

import (
	"math/rand/v2"
	"strings"
	"testing"
)

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

// TestFoldWordsAsEqualFold: FoldWords.In answers as a scan of every
// window of s with strings.EqualFold does, for ASCII words and others,
// on texts with upper case and multi-byte runes that fold to ASCII
// letters (the Kelvin sign, the long s).
func TestFoldWordsAsEqualFold(t *testing.T) {
	reference := func(s string, words []string) bool {
		for i := range len(s) {
			for _, w := range words {
				if w != "" && len(s)-i >= len(w) && strings.EqualFold(s[i:i+len(w)], w) {
					return true
				}
			}
		}
		return false
	}
	sets := [][]string{
		{"search_path", "set_config", "reset", "discard", "rollback", "abort"},
		{"ks", "as"},
		{asciiLower("Éx"), `u&"`},
		// The proxy's noteSet: a dozen words, several with one first letter.
		{"temp", "search_path", "set_config", "reset", "discard", "rollback", "abort",
			"default_transaction", "characteristics", "restrict_nonsystem", "idle_in_transaction"},
		// Words of one byte (a table named t), ASCII and not.
		{"t", "ab", `u&"`},
		{"x", "K"},
		// More than 16 words: words i and i+16 share a bit of the table.
		{"za", "zb", "zc", "zd", "ze", "zf", "zg", "zh", "zi", "zj", "zk", "zl", "zm", "zn", "zo", "zp",
			"ks", "as", "et", "_x"},
	}
	pieces := []string{"s", "S", "k", "K", "\u212a", "\u017f", "a", "A", "_", "É", "é", "x", "X", "u&\"", "et", "ET",
		"search_path", "SEARCH_PATH", "set_config", "Abort", "reseT", "z", "Z", "t", "T", "b", "TEMP", "idle", "_in_transaction", "Default_"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		for _, words := range sets {
			if got, want := NewFoldWords(words...).In(s), reference(s, words); got != want {
				t.Fatalf("In(%q) with %q = %v, EqualFold's scan %v", s, words, got, want)
			}
		}
	}
}
