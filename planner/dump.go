package planner

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file hides mzproxy's own objects from pg_dump. pg_dump reads the
// system catalogs with fixed queries (simple Queries, search_path empty);
// it cannot be told to skip a schema's objects and the triggers they put on
// user tables. So in a pg_dump session the proxy forwards every such query
// with each FROM item naming a catalog replaced by the same catalog
// filtered to the rows that are not mzproxy's:
//
//	FROM pg_catalog.pg_class c
//	  -> FROM (SELECT tableoid, * FROM pg_catalog.pg_class
//	           WHERE relnamespace NOT IN (<hidden schemas>)) AS c
//
// pg_dump then sees a database without mzproxy's schemas, the functions,
// tables, views, types and constraints in them, the event triggers and the
// triggers calling them; whatever still points at a hidden object
// (pg_depend, pg_description, pg_init_privs rows) it ignores, as it does
// for any object it does not dump.

// DumpView is what a pg_dump session must not see and what it must see in
// addition.
type DumpView struct {
	// HiddenSchemas are the schemas whose objects pg_dump must not see.
	HiddenSchemas []string
	// Reloptions returns an SQL expression (text[]) that replaces
	// <rel>.reloptions of a pg_class row called rel (a quoted identifier):
	// how extra relation options (RETAIN HISTORY) reach the dump. Nil
	// leaves reloptions alone.
	Reloptions func(rel string) string
}

// hiddenBy is, per catalog, the condition (SQL over the catalog's own
// columns, %s standing for the hidden schemas' OIDs as a subquery) that
// keeps a row: its object is not in a hidden schema and is not a trigger
// or event trigger calling a function in one.
var hiddenBy = map[string]string{
	"pg_namespace":     "oid NOT IN (%s)",
	"pg_class":         "relnamespace NOT IN (%s)",
	"pg_proc":          "pronamespace NOT IN (%s)",
	"pg_type":          "typnamespace NOT IN (%s)",
	"pg_constraint":    "connamespace NOT IN (%s)",
	"pg_operator":      "oprnamespace NOT IN (%s)",
	"pg_opclass":       "opcnamespace NOT IN (%s)",
	"pg_opfamily":      "opfnamespace NOT IN (%s)",
	"pg_collation":     "collnamespace NOT IN (%s)",
	"pg_conversion":    "connamespace NOT IN (%s)",
	"pg_ts_parser":     "prsnamespace NOT IN (%s)",
	"pg_ts_template":   "tmplnamespace NOT IN (%s)",
	"pg_ts_dict":       "dictnamespace NOT IN (%s)",
	"pg_ts_config":     "cfgnamespace NOT IN (%s)",
	"pg_statistic_ext": "stxnamespace NOT IN (%s)",
	"pg_default_acl":   "defaclnamespace NOT IN (%s)",
	"pg_trigger":       "tgfoid NOT IN (SELECT oid FROM pg_catalog.pg_proc WHERE pronamespace IN (%s))",
	"pg_event_trigger": "evtfoid NOT IN (SELECT oid FROM pg_catalog.pg_proc WHERE pronamespace IN (%s))",
	// pg_dump fails on a rule whose relation it did not see.
	"pg_rewrite": "ev_class NOT IN (SELECT oid FROM pg_catalog.pg_class WHERE relnamespace IN (%s))",
}

// HideFromDump rewrites one query of a pg_dump session so that it does not
// see v's hidden objects (see DumpView). It reports false, and sql is to be
// sent as it is, when the string is not a single SELECT reading one of the
// filtered catalogs, or does not parse (the backend then reports the
// error).
func HideFromDump(sql string, v DumpView) (string, bool) {
	if !strings.Contains(sql, "pg_") || len(v.HiddenSchemas) == 0 {
		return sql, false
	}
	r, err := parse(sql)
	if err != nil || len(r.Stmts) != 1 || r.Stmts[0].Stmt.GetSelectStmt() == nil {
		return sql, false
	}
	stmt := r.Stmts[0].Stmt

	// Collect first, replace after: a replacement holds catalog
	// references of its own that must stay as they are.
	var (
		items     []*pg.Node
		classes   = map[string]bool{} // aliases of pg_class items
		qualified []string
	)
	visit(stmt.ProtoReflect(), func(m protoreflect.Message) {
		n, ok := m.Interface().(*pg.Node)
		if !ok {
			return
		}
		rv := n.GetRangeVar()
		if rv == nil || rv.Catalogname != "" || rv.Schemaname != "" && rv.Schemaname != "pg_catalog" {
			return
		}
		if _, ok := hiddenBy[rv.Relname]; !ok {
			return
		}
		items = append(items, n)
		if rv.Relname == "pg_class" {
			classes[aliasFor(rv).Aliasname] = true
		}
		if rv.Alias == nil && rv.Schemaname != "" {
			qualified = append(qualified, rv.Schemaname+"\x00"+rv.Relname)
		}
	})
	if len(items) == 0 {
		return sql, false
	}
	hidden := hiddenSchemaOIDs(v.HiddenSchemas)
	for _, n := range items {
		if !replaceCatalog(n, hidden) {
			return sql, false
		}
	}
	fixQualified(stmt, qualified)
	if v.Reloptions != nil && !replaceReloptions(stmt, classes, v.Reloptions) {
		return sql, false
	}
	out, err := deparse(stmt)
	if err != nil {
		return sql, false
	}
	return out, true
}

// hiddenSchemaOIDs is a subquery of the OIDs of schemas.
func hiddenSchemaOIDs(schemas []string) string {
	lits := make([]string, len(schemas))
	for i, s := range schemas {
		lits[i] = "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname IN (" + strings.Join(lits, ", ") + ")"
}

// replaceCatalog replaces the FROM item n (a catalog in hiddenBy) with
// the catalog filtered, under the item's alias (or the catalog's name).
// tableoid is a system column, not part of *: pg_dump reads it.
func replaceCatalog(n *pg.Node, hidden string) bool {
	rv := n.GetRangeVar()
	cond := strings.ReplaceAll(hiddenBy[rv.Relname], "%s", hidden)
	r, err := pg.Parse("SELECT * FROM (SELECT tableoid, * FROM pg_catalog." + rv.Relname + " WHERE " + cond + ") AS x")
	if err != nil {
		return false
	}
	sub := r.Stmts[0].Stmt.GetSelectStmt().FromClause[0].GetRangeSubselect()
	sub.Alias = aliasFor(rv)
	n.Node = &pg.Node_RangeSubselect{RangeSubselect: sub}
	return true
}

// replaceReloptions replaces every <alias>.reloptions of a pg_class item
// with the expression reloptions gives for it.
func replaceReloptions(stmt *pg.Node, classes map[string]bool, reloptions func(string) string) bool {
	var refs []*pg.Node
	visit(stmt.ProtoReflect(), func(m protoreflect.Message) {
		n, ok := m.Interface().(*pg.Node)
		if !ok {
			return
		}
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) != 2 || cr.Fields[1].GetString_().GetSval() != "reloptions" {
			return
		}
		if classes[cr.Fields[0].GetString_().GetSval()] {
			refs = append(refs, n)
		}
	})
	for _, n := range refs {
		rel := quoteAlways(n.GetColumnRef().Fields[0].GetString_().GetSval())
		r, err := pg.Parse("SELECT " + reloptions(rel))
		if err != nil || len(r.Stmts) != 1 {
			return false
		}
		n.Node = r.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val.Node
	}
	return true
}
