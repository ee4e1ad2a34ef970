package planner

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// WithTemplate returns sql, a query string of one CREATE DATABASE that
// names no template of its own, made to copy template instead; ok is
// false for anything else, which then runs as the client wrote it. The
// client's text is kept as it is (its options, OWNER, ENCODING, LOCALE,
// STRATEGY, ..., spelled as the client spelled them) and the option
// appended: a template that is a copy of template1 accepts the same
// options as template1, with the same errors. template must be a plain
// lower-case identifier. name is the database the statement makes.
func WithTemplate(sql, template string) (copySQL, name string, ok bool) {
	tree, err := pg.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return "", "", false
	}
	create, ok := tree.Stmts[0].Stmt.GetNode().(*pg.Node_CreatedbStmt)
	if !ok {
		return "", "", false
	}
	for _, o := range create.CreatedbStmt.Options {
		if d := o.GetDefElem(); d != nil && d.Defname == "template" {
			// The client's own template (template0 for pg_dump's
			// restores, or any other) is respected; so is TEMPLATE
			// DEFAULT, which a second TEMPLATE would make an error.
			return "", "", false
		}
	}
	// The option goes after the statement's last token: before a
	// trailing semicolon or comment.
	scan, err := pg.Scan(sql)
	if err != nil {
		return "", "", false
	}
	end := -1
	for _, tok := range scan.Tokens {
		switch tok.Token {
		case pg.Token_SQL_COMMENT, pg.Token_C_COMMENT, pg.Token_ASCII_59:
		default:
			end = int(tok.End)
		}
	}
	if end < 0 || end > len(sql) {
		return "", "", false
	}
	return sql[:end] + " TEMPLATE " + template + sql[end:], create.CreatedbStmt.Dbname, true
}

// DropDatabase reads sql, a query string of one DROP DATABASE: the
// database it names and whether it says WITH (FORCE); ok is false for
// anything else.
func DropDatabase(sql string) (name string, force, ok bool) {
	tree, err := pg.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return "", false, false
	}
	drop, isDrop := tree.Stmts[0].Stmt.GetNode().(*pg.Node_DropdbStmt)
	if !isDrop {
		return "", false, false
	}
	for _, o := range drop.DropdbStmt.Options {
		if d := o.GetDefElem(); d != nil && d.Defname == "force" {
			force = true
		}
	}
	return drop.DropdbStmt.Dbname, force, true
}
