package planner

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// A read at an explicit timestamp (AS OF, --history-reads) replaces each
// managed table it names with a subquery over the table's history. Done on
// the parse tree, that costs a parse of each subquery and a deparse of the
// whole statement (pg_query's C code behind protobuf encoding each way):
// under --history-reads, where every read is planned and a test corpus's
// texts never repeat, 26% of the proxy's CPU (docs/corpus-cost.md, session
// 20). When the only change is those replacements, the rewrite splices the
// subqueries into the client's own text instead, at the names' tokens, and
// leaves the tree alone; anything else (a view's definition put in, mz_now()
// replaced, columns qualified with a replaced table's schema, ONLY or a
// trailing *, a comment, a name spelled in a way the tokens do not show)
// takes the tree's way.

// spliceRewrites turns splicing on; tests turn it off to compare the two
// ways.
var spliceRewrites = true

// historySplice is one table reference the rewrite replaces: the
// RangeVar as parsed and the subquery that takes the place of its name.
type historySplice struct {
	rv       *pg.RangeVar
	subquery string
}

// tokensOf is toks, the tokens of text, for sql, the statement's text
// after preparse, when sql is text's start, so that the tokens' and the
// parse tree's offsets are sql's; nil when it is not, or when text has a
// comment (dropped from the tokens; one that ends a spliced text without a
// newline would swallow whatever a caller appends to it).
func tokensOf(text string, toks []token, sql string) []token {
	if toks == nil || !strings.HasPrefix(text, sql) || strings.Contains(sql, "--") || strings.Contains(sql, "/*") {
		return nil
	}
	return toks[:statementTokens(toks, len(sql))]
}

// spliceHistory is sql with each splice's name (the tokens of its
// [catalog.][schema.]name) replaced by its subquery, followed by the
// relation's name as alias where the reference has none (aliasFor). ok is
// false when a splice's tokens are not where and what its RangeVar says.
func spliceHistory(sql string, toks []token, splices []historySplice) (string, bool) {
	splices = slices.Clone(splices)
	slices.SortFunc(splices, func(x, y historySplice) int { return int(x.rv.Location - y.rv.Location) })
	var b strings.Builder
	b.Grow(len(sql) + 256*len(splices))
	done, i := 0, 0
	for _, sp := range splices {
		rv := sp.rv
		if !rv.Inh || rv.Location < int32(done) {
			return "", false // ONLY t; or overlapping
		}
		for i < len(toks) && toks[i].start < int(rv.Location) {
			i++
		}
		parts := 1
		if rv.Schemaname != "" {
			parts++
		}
		if rv.Catalogname != "" {
			parts++
		}
		last := i + 2*(parts-1)
		if i >= len(toks) || toks[i].start != int(rv.Location) || last >= len(toks) {
			return "", false
		}
		for k := i; k <= last; k++ {
			t := toks[k]
			if (k-i)%2 == 1 {
				if sql[t.start:t.end] != "." {
					return "", false
				}
			} else if !nameToken(sql, t) {
				return "", false
			}
		}
		if last+1 < len(toks) && sql[toks[last+1].start:toks[last+1].end] == "*" {
			return "", false // t * (inheritance, spelled out)
		}
		if i == 0 || !fromItemStart(sql, toks[i-1]) {
			return "", false // TABLE t, or a place not seen here before
		}
		b.WriteString(sql[done:toks[i].start])
		b.WriteString(sp.subquery)
		if rv.Alias == nil {
			b.WriteString(" AS ")
			b.WriteString(quoteAlways(rv.Relname))
		}
		done = toks[last].end
		i = last + 1
	}
	b.WriteString(sql[done:])
	return b.String(), true
}

// nameToken reports whether t spells a name as the parser reads it: an
// identifier, plain or double-quoted, or a keyword the grammar takes as a
// name there (U&"..." is left to the tree's way).
func nameToken(sql string, t token) bool {
	s := sql[t.start:t.end]
	if s == "" || len(s) > 1 && (s[0] == 'U' || s[0] == 'u') && s[1] == '&' {
		return false
	}
	return t.tok == pg.Token_IDENT || t.keyword
}

// fromItemStart reports whether a FROM item may follow t, so that a
// subquery may take the place of a table name after it: FROM, JOIN, a
// comma or an opening parenthesis (not TABLE t, which is SELECT * FROM t
// to the parser, but takes no subquery).
func fromItemStart(sql string, t token) bool {
	switch sql[t.start:t.end] {
	case ",", "(":
		return true
	}
	switch t.word(sql) {
	case "from", "join":
		return true
	}
	return false
}
