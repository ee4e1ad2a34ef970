package planner

import (
	"errors"
	"strings"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file bounds how deep a parse tree pg_query may have to build, before
// any text reaches it. pg_query's parser is C: it serializes the tree to
// protobuf recursively (protobuf-c packs one C stack frame per level, and a
// SIGSEGV there kills the whole process at about 25,000 levels), and Go's
// protobuf decoder refuses trees deeper than 10,000 messages (about 5,000
// levels of 1+1+...+1). PostgreSQL itself refuses such statements with
// 54001 (1+1+...+1 with 4,092 additions, 2,112 nested scalar subqueries)
// or with a syntax error when its grammar stack fills (about 10,000
// parentheses).
//
// nestingDepth is a lexical upper bound of the tree's depth, counted in
// "levels" (one level is at most two protobuf messages): the text is cut
// into tokens the way PostgreSQL's scanner cuts it (string literals,
// escape strings, quoted identifiers, dollar quotes and nested comments
// are skipped whole), and the depth at a point of the text is, summed over
// the brackets (and CASE ... END) open there:
//
//	frameLevels                  what a bracket itself may nest (a subquery: SubLink, SelectStmt, ResTarget)
//	+ set operations and JOINs   seen in the bracket: they nest left-deep, so they are never forgotten
//	+ the chain                  operators and words since the bracket's last ',', AND or OR
//
// A comma separates list elements (arguments, columns, VALUES rows, IN
// lists) that are siblings in the tree, and PostgreSQL's grammar flattens
// a chain of ANDs (or ORs) into one node whose arguments are siblings too:
// so long lists and long AND/OR chains cost nothing, while 1+1+...+1,
// NOT NOT ..., x::t::t..., - - x and nested brackets cost one level or more
// per token. The AND of BETWEEN ... AND is not a separator. Every word
// counts (identifiers too: telling keywords apart would need PostgreSQL's
// keyword list, and overcounting only makes the bound more conservative).
// FuzzNestingDepth checks the bound against the depth of the trees
// pg_query actually builds.

// maxNestingLevels is the deepest tree the planner lets pg_query build:
// about 9,000 protobuf messages, under Go's decoder limit of 10,000, and
// about 1.5 MB of C stack in protobuf-c (threads have 8 MB by default; a
// sum of 4,000 terms still parses with 2 MB).
// It admits 1+1+...+1 with about 4,480 additions, more than PostgreSQL's
// own limit (4,091 with the default max_stack_depth of 2MB).
const maxNestingLevels = 4500

// maxDeparseMessages bounds the trees pg_query's C deparser may recurse
// through (reads rewritten for an explicit timestamp only). It takes about
// 1.4 kB of C stack per level of 1+1+...+1, against 0.3 kB for parsing:
// 2,000 messages (a sum of about 1,000 terms) is 1.4 MB, which a thread's
// 2 MB stack still holds (8 MB by default). Deeper rewritten reads get
// 54001.
const maxDeparseMessages = 2000

// frameLevels is what an open bracket may add by itself besides its
// tokens: a scalar subquery (SubLink, SelectStmt, ResTarget) and the
// boolean nodes of OR over AND in its WHERE clause.
const frameLevels = 4

// statementLevels is what the statement around the first bracket may
// add (RawStmt, InsertStmt, SelectStmt, the VALUES lists).
const statementLevels = 8

// errStackDepth is PostgreSQL's error for a statement too deeply nested to
// parse, word for word (with the default max_stack_depth).
func errStackDepth() *pgerr.Error {
	return pgerr.New(pgerr.StatementTooComplex, "stack depth limit exceeded").
		WithHint(`Increase the configuration parameter "max_stack_depth" (currently 2048kB), after ensuring the platform's stack depth limit is adequate.`)
}

// checkNesting returns errStackDepth when a statement of sql could nest
// deeper than pg_query can safely parse.
func checkNesting(sql string) error {
	if nestingDepth(sql, maxNestingLevels) > maxNestingLevels {
		return errStackDepth()
	}
	return nil
}

// parse is pg.Parse behind checkNesting: the planner parses only through
// it, so no text reaches pg_query's C code unchecked.
//
// The serialized trees of recent texts are kept: a read at an explicit
// timestamp, or any read with --history-reads, is planned twice in a row
// on a plan-cache miss (without the catalog, to learn that it needs one,
// then with it), and the C parse is the larger part of parsing. Each call
// still decodes a tree of its own, since planning mutates it.
func parse(sql string) (*pg.ParseResult, error) {
	parseCalls.Add(1)
	tree, ok := recentParses.Get(sql)
	if !ok {
		if err := checkNesting(sql); err != nil {
			return nil, err
		}
		var err error
		if tree, err = parser.ParseToProtobuf(sql); err != nil {
			if isStackDepth(err) {
				return nil, errStackDepth()
			}
			return nil, err
		}
		if len(sql) <= maxRecentParseText {
			recentParses.Add(sql, tree)
		}
	}
	r := &pg.ParseResult{}
	if err := proto.Unmarshal(tree, r); err != nil {
		if isStackDepth(err) {
			return nil, errStackDepth()
		}
		return nil, err
	}
	return r, nil
}

// recentParses maps recently parsed texts (up to maxRecentParseText bytes)
// to their serialized trees.
var recentParses, _ = lru.New[string, []byte](64)

const maxRecentParseText = 16 << 10

// parseCalls counts calls of parse, for tests that check what the plan
// cache saves.
var parseCalls atomic.Uint64

// isStackDepth reports whether a pg_query error is its protobuf decoder
// refusing a tree too deep (which checkNesting should have prevented).
func isStackDepth(err error) bool {
	return err != nil && !errors.As(err, new(*pgerr.Error)) &&
		strings.Contains(err.Error(), "exceeded maximum recursion depth")
}

// nestFrame is an open bracket, CASE or the statement itself.
type nestFrame struct {
	closer  byte // ')' or ']' for brackets, 'E' for CASE ... END, 0 for the statement
	base    int  // frameLevels or statementLevels
	setOps  int  // UNION, INTERSECT, EXCEPT, JOIN
	chain   int  // operators and words since the last separator
	between int  // BETWEENs whose AND has not come yet
}

func (f *nestFrame) levels() int { return f.base + f.setOps + f.chain }

// nester is the state of nestingDepth: the open frames and the running sum
// of their levels.
type nester struct {
	frames []nestFrame
	depth  int // sum of levels() over frames
	max    int
}

func (n *nester) top() *nestFrame { return &n.frames[len(n.frames)-1] }

func (n *nester) push(closer byte) {
	n.frames = append(n.frames, nestFrame{closer: closer, base: frameLevels})
	n.add(frameLevels)
}

// pop closes the innermost frame (at a ')', the CASEs left open inside
// the parenthesis too: the text does not parse anyway).
func (n *nester) pop(closer byte) {
	for len(n.frames) > 1 {
		f := n.top()
		n.depth -= f.levels()
		n.frames = n.frames[:len(n.frames)-1]
		if f.closer == closer || closer == 'E' {
			return
		}
	}
}

func (n *nester) add(levels int) {
	n.depth += levels
	n.max = max(n.max, n.depth)
}

// count adds tokens to the innermost frame's chain.
func (n *nester) count(tokens int) {
	n.top().chain += tokens
	n.add(tokens)
}

// separate ends the innermost frame's chain (',', AND, OR).
func (n *nester) separate() {
	f := n.top()
	n.depth -= f.chain
	f.chain = 0
}

// statementEnd starts over after a top-level semicolon.
func (n *nester) statementEnd() {
	n.frames = append(n.frames[:0], nestFrame{base: statementLevels})
	n.depth = statementLevels
	n.max = max(n.max, n.depth)
}

// word accounts for a keyword or identifier (quoted ones are never
// keywords).
func (n *nester) word(w string, quoted bool) {
	f := n.top()
	kw := func(k string) bool { return !quoted && len(w) == len(k) && equalFold(w, k) }
	switch {
	case kw("and") && f.between > 0:
		f.between--
		n.count(1)
	case kw("and"), kw("or"):
		n.separate()
	case kw("between"):
		f.between++
		n.count(1)
	case kw("union"), kw("intersect"), kw("except"), kw("join"):
		f.setOps++
		n.add(1)
	case kw("case"):
		n.count(1)
		n.push('E')
	case kw("end") && f.closer == 'E':
		n.pop('E')
	default:
		n.count(1)
	}
}

// nestingDepth returns the bound described above for the deepest
// statement of sql, or some value over limit as soon as one exceeds it.
func nestingDepth(sql string, limit int) int {
	n := &nester{}
	n.statementEnd()
	for i := 0; i < len(sql) && n.max <= limit; {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '(' || c == '[':
			n.push(closerOf(c))
			i++
		case c == ')' || c == ']':
			n.pop(c)
			i++
		case c == ',':
			n.separate()
			i++
		case c == ';':
			if len(n.frames) == 1 {
				n.statementEnd()
			}
			i++
		default:
			i = n.token(sql, i)
		}
	}
	return n.max
}

// token accounts for the token at sql[i] that is not whitespace or
// punctuation, and returns the offset after it.
func (n *nester) token(sql string, i int) int {
	c := sql[i]
	switch {
	case c == '-' && strings.HasPrefix(sql[i:], "--"):
		return lineCommentEnd(sql, i)
	case c == '/' && strings.HasPrefix(sql[i:], "/*"):
		end, _ := blockCommentEnd(sql, i)
		return end
	case c == '\'':
		end, _ := quotedEnd(sql, i+1, '\'', false)
		return end
	case c == '"':
		n.word("", true)
		end, _ := quotedEnd(sql, i+1, '"', false)
		return end
	case c == '$':
		return n.dollar(sql, i)
	case c == ':' && strings.HasPrefix(sql[i:], "::"):
		n.count(1)
		return i + 2
	case isDigit(c) || c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
		return numberEnd(sql, i)
	case isIdentStart(c):
		j := identEnd(sql, i)
		if j == i+1 && (c == 'e' || c == 'E') && j < len(sql) && sql[j] == '\'' {
			end, _ := quotedEnd(sql, j+1, '\'', true) // E'...': backslash escapes
			return end
		}
		n.word(sql[i:j], false)
		return j
	case isOpChar(c):
		j, tokens := operatorEnd(sql, i)
		n.count(tokens)
		return j
	}
	return i + 1 // '.', ':', '{' ...: no level of their own
}

// dollar accounts for a parameter ($1) or skips a dollar-quoted string
// ($$...$$, $tag$...$tag$).
func (n *nester) dollar(sql string, i int) int {
	j := i + 1
	if j < len(sql) && isDigit(sql[j]) {
		for j < len(sql) && isDigit(sql[j]) {
			j++
		}
		return j
	}
	tag := dollarTag(sql, i)
	if tag == "" {
		return i + 1
	}
	end, _ := dollarQuotedEnd(sql, i, tag)
	return end
}

// dollarTag returns the opening delimiter of the dollar-quoted string at
// sql[i] ("$$", "$tag$"), or "" when sql[i] starts none.
func dollarTag(sql string, i int) string {
	j := i + 1
	if j < len(sql) && isIdentStart(sql[j]) {
		// The tag: an identifier without '$' ($a$b$ is tag "a", body "b").
		j++
		for j < len(sql) && (isIdentStart(sql[j]) || isDigit(sql[j])) {
			j++
		}
	}
	if j >= len(sql) || sql[j] != '$' {
		return ""
	}
	return sql[i : j+1]
}

// dollarQuotedEnd returns the offset after the dollar-quoted string at
// sql[i] opened by tag, and whether it is closed (len(sql) if not).
func dollarQuotedEnd(sql string, i int, tag string) (int, bool) {
	end := strings.Index(sql[i+len(tag):], tag)
	if end < 0 {
		return len(sql), false
	}
	return i + len(tag) + end + len(tag), true
}

func lineCommentEnd(sql string, i int) int {
	for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
		i++
	}
	return i
}

// blockCommentEnd skips a comment starting at sql[i], and tells whether
// it is closed (len(sql) if not); PostgreSQL's block comments nest.
func blockCommentEnd(sql string, i int) (int, bool) {
	depth := 0
	for i < len(sql) {
		switch {
		case strings.HasPrefix(sql[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(sql[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		default:
			i++
		}
	}
	return i, false
}

// quotedEnd returns the offset after the closing quote of a literal or
// quoted identifier whose text starts at sql[i], and whether there is one
// (len(sql) if not). A doubled quote is part of the text; in escape
// strings so is a backslash and the byte after it.
func quotedEnd(sql string, i int, quote byte, backslash bool) (int, bool) {
	for i < len(sql) {
		switch c := sql[i]; {
		case backslash && c == '\\':
			i += 2
		case c == quote && i+1 < len(sql) && sql[i+1] == quote:
			i += 2
		case c == quote:
			return i + 1, true
		default:
			i++
		}
	}
	return len(sql), false
}

// numberEnd skips a numeric literal (1, 1.5, .5e-3, 0x1F, 1_000).
func numberEnd(sql string, i int) int {
	for i < len(sql) {
		c := sql[i]
		switch {
		case isDigit(c) || c == '.' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			i++
		case (c == '+' || c == '-') && (sql[i-1] == 'e' || sql[i-1] == 'E'):
			i++
		default:
			return i
		}
	}
	return i
}

// operatorEnd returns the end of the run of operator characters at
// sql[i] (stopping where a comment starts) and how many operator tokens
// it can hold at most: PostgreSQL splits trailing '+' and '-' off an
// operator made only of + - * / < > = (so "*-" is "*" and "-"), and each
// of them is one more node.
func operatorEnd(sql string, i int) (int, int) {
	j, plusMinus, other := i, 0, 0
	for j < len(sql) && isOpChar(sql[j]) {
		if j > i && (strings.HasPrefix(sql[j:], "--") || strings.HasPrefix(sql[j:], "/*")) {
			break
		}
		if sql[j] == '+' || sql[j] == '-' {
			plusMinus++
		} else {
			other = 1
		}
		j++
	}
	return j, plusMinus + other
}

func closerOf(open byte) byte {
	if open == '[' {
		return ']'
	}
	return ')'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// identEnd returns the end of the identifier or keyword at sql[i] (which
// may hold digits and '$' after its first byte).
func identEnd(sql string, i int) int {
	i++
	for i < len(sql) && (isIdentStart(sql[i]) || isDigit(sql[i]) || sql[i] == '$') {
		i++
	}
	return i
}

func isOpChar(c byte) bool { return strings.IndexByte("+-*/<>=~!@#%^&|`?", c) >= 0 }

// messageDepth is the nesting depth of the protobuf messages under m (m
// itself is 1): what pg_query's C code recurses through when it deparses
// a tree.
func messageDepth(m protoreflect.Message) int {
	deepest := 0
	eachMessage(m, func(c protoreflect.Message) bool {
		deepest = max(deepest, messageDepth(c))
		return true
	})
	return deepest + 1
}
