// Package planner is mzproxy's SQL work: it turns a query string into
// planned statements, without I/O, clocks or mutable globals.
//
// # What Plan does with a query string
//
//  0. Bound the nesting. Before any text reaches pg_query (whose C code
//     recurses once per level of the tree and crashed the process at
//     25,000 levels), a lexical scan in Go bounds the depth of the tree
//     the parser would build (depth.go); a statement that could be deeper
//     than maxNestingLevels gets PostgreSQL's 54001 "stack depth limit
//     exceeded". Long lists, AND/OR chains, VALUES rows and many
//     statements cost nothing; chains of operators and nested brackets do.
//  1. Split. The string is tokenized into PostgreSQL's scanner's tokens
//     and cut at top-level semicolons (not inside parentheses or a BEGIN
//     ATOMIC body). Empty statements vanish. A scanner in Go (scan.go)
//     gives the tokens for common texts; anything it does not handle
//     plainly (E'...', dollar quotes, junk after a number, an unterminated
//     quote, ...) goes to PostgreSQL's own scanner (pg_query's Scan), so
//     errors are its own.
//  2. Materialize syntax. Still on tokens, so literals, dollar quotes,
//     quoted identifiers and comments are never mistaken for syntax:
//     a trailing `AS OF [AT LEAST] <expr>` of a query is cut off (the
//     expression text goes to Statement.AsOf for the proxy to evaluate);
//     `EXPLAIN TIMESTAMP [AS TEXT|JSON] FOR <select>` and
//     `SUBSCRIBE ...` are recognised; `RETAIN HISTORY [=] FOR '<interval>'`
//     (or the relation option `retain_history = '<interval>'` that a
//     pg_dump through the proxy writes for it) is removed from CREATE
//     TABLE ... WITH (...) and ALTER TABLE ... SET/RESET (...), other
//     options staying intact.
//  3. Parse with pg_query (PostgreSQL's grammar). Syntax errors are
//     *pgerr.Error with SQLSTATE 42601, PostgreSQL's message and position
//     (Extra['P']), and match errors.Is(err, ErrSyntax) so that the proxy
//     can choose to forward the text and let the backend answer instead.
//  4. Classify (Kind, command tag, transaction/SET/cursor details) and find
//     the relations read and written with SQL's scoping (CTEs shadow
//     tables, recursive CTEs see themselves, FOR UPDATE OF names are not
//     relations, functions in FROM are not relations), resolved through the
//     Catalog the proxy implements.
//  5. Rewrite, only for a read at an explicit timestamp: a query with AS
//     OF, a query calling mz_now(), or any query in history mode
//     (Options.ExplicitTimestamp). A present read is forwarded unchanged:
//     in mzproxy's storage model the current tables show exactly the state
//     at the oracle's read timestamp.
//
// # The rewrite
//
// Every reference to a managed table becomes
//
//	(SELECT "c1", "c2" FROM "mzproxy"."h17" WHERE mz_from <= $N AND mz_to > $N) AS alias
//
// where alias is the reference's own alias (with its column aliases) or the
// table's name, and $N is the statement's own parameter count plus one. A
// column reference qualified with a schema (public.t.a) becomes t.a. A
// managed view that reads managed tables (transitively) is replaced by its
// definition (Object.ViewSQL), rewritten the same way; views reading only
// unmanaged relations stay as they are. A reference the statement itself
// makes (not one inside a view's definition) keeps its name in a guard
// that reads no row, `AND NOT EXISTS (SELECT FROM t a, public.t b WHERE
// false)` (a view's: `SELECT * FROM (<definition>) v WHERE NOT EXISTS
// ...`): the name as written and the one the catalog resolved it to, so
// PostgreSQL resolves and checks them itself (schema USAGE, SELECT) as it
// would without the timestamp (guard in rewrite.go). The analyzer leaves
// such a row-less EXISTS alone (checksOnly), so a rewrite rewrites to
// itself. A table with row-level security enabled is refused (0A000):
// its history has no policies. mz_now() becomes $N::bigint: the
// chosen timestamp in milliseconds since the Unix epoch (Materialize's type
// is mz_timestamp; bigint compares with integer columns the same way); an
// output column that is a bare mz_now() is named mz_now, as in Materialize.
//
// The AS OF expression is looked at too (asof.go): a parameter alone or
// cast ($2, $2::timestamptz) is AsOf.Param, read by the proxy at Bind (the
// statement keeps the client's numbering); mz_now() in it becomes a hole
// (AsOf.Now) for the timestamp of the present; anything else is SQL for the
// backend to evaluate.
//
// The rewritten tree is deparsed by pg_query (if it is at most
// maxDeparseMessages deep: the deparser needs more C stack per level than
// the parser; deeper gets 54001), and the result is kept as a
// Template: the text between the places $N occurs, found by scanning the
// output's tokens, never by string search. The proxy renders it with "$N"
// (extended protocol, the timestamp being one more int8 parameter) or with
// a literal like '1700000000000'::int8 (simple protocol).
//
// Replacement nodes are always cut out of trees pg_query itself parsed,
// never assembled by hand: the deparser is C, and a node of an unexpected
// shape would crash the process. FuzzRewrite checks that every rewrite
// re-parses and that rewriting its output again is a no-op.
//
// Only what the catalog knows is rewritten: a view created directly in
// PostgreSQL over managed tables, or a temporary table shadowing a managed
// table's name, reads the present.
//
// Refused at an explicit timestamp (SQLSTATE 0A000): FOR UPDATE/SHARE on a
// statement reading managed tables, TABLESAMPLE on a managed table, mz_now()
// in a write. Not rewritten: system columns (xmin, ctid) of managed tables
// do not exist in the history subquery; a whole-row reference (SELECT t
// FROM t) has a record type instead of t's composite type.
//
// # The plan cache
//
// Planner caches the plans of a query string per (text, search_path,
// history mode). A hit at the catalog revision it was made at returns
// without parsing (about 60 ns, no allocation). A hit at another revision
// repeats the plan's catalog lookups and reuses the plan if every name still
// resolves to the same definition; so DDL on one table does not flush
// unrelated plans. Plans are shared: callers must not modify them.
//
// The text of the key is the query's fingerprint (fingerprint.go) instead
// when nothing in the plan depends on the literals but each statement's
// SQL: plain reads, writes, EXPLAIN and COPY ... TO, not rewritten for a
// timestamp. The fingerprint is the text lexed in Go, literals replaced by
// a placeholder of their token class, comments and runs of whitespace
// dropped, words lower-cased. So pgbench's `SELECT ... WHERE aid = 4711`
// with a new aid each time is a hit, found without calling pg_query, and
// gets copies of the cached statements with its own text as SQL (about
// 1.5 µs of CPU, against 50-80 µs to parse and plan:
// BenchmarkPlanRepeatedLiterals). Texts without literals stay under their
// exact key, so their hits need no lexing.
//
// Reads with AS OF or mz_now(), and every read in history mode, keep
// literals' values in their plans (the AS OF expression, the deparsed
// Template). They are cached under the query's skeleton (its literals
// replaced by placeholders, nothing else changed) with the places of the
// literals in the Template, found by planning the text once more with
// markers for the literals (literals.go): a text that differs only in its
// literals is a hit without calling pg_query too, its Template the cached
// one with its own literals spliced in as the deparser spells them (about
// 2-3 µs, against 300 µs to parse, rewrite and deparse). SET, SHOW,
// transaction control, cursors, RETAIN HISTORY, SUBSCRIBE and EXPLAIN
// TIMESTAMP are cached under their exact text; so is any text whose
// lexing is in doubt (unterminated quotes, adjacent string literals,
// escapes the scanner checks, unusual numbers, float(n), BEGIN ATOMIC) and
// any read whose literals' places are in doubt.
package planner
