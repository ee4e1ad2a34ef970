package storage

import (
	"strings"
)

// installTimeValues are the values an install computes when it runs (the
// clock, a random key), keyed by table.column, or by sequence for its
// value, in the order the chain made their tables and sequences (so an
// expression may read an earlier one's value). The flat script computes
// them with these expressions; a copy of a template database computes
// them again (reseedSQL). TestFlatInstall finds such values by
// installing the chain twice and fails while one is missing here.
var installTimeValues = []installTimeValue{
	{"schema_version.installed_at", "now()"},
	{"oracle.read_ts", Schema + ".now_ms()"},
	{"oracle_write.write_ts", "(SELECT o.read_ts FROM " + Schema + ".oracle o WHERE o.timeline = 'EpochMilliseconds')"},
	{"txns_durable.upper", "(SELECT o.read_ts + 1 FROM " + Schema + ".oracle o WHERE o.timeline = 'EpochMilliseconds')"},
	{"write_key.k", "gen_random_uuid()::text || gen_random_uuid()::text"},
	{"pinned", "GREATEST((SELECT d.upper - 1 FROM " + Schema + ".txns_durable d), " + Schema + ".now_ms())"},
}

type installTimeValue struct{ key, expr string }

// installTimeExpr is the expression of install-time value key.
func installTimeExpr(key string) (string, bool) {
	for _, v := range installTimeValues {
		if v.key == key {
			return v.expr, true
		}
	}
	return "", false
}

// TemplateMarker is the table whose presence says that a database is a
// copy of a template database (proxy/template.go) whose install-time
// values are still the template's: Install computes them afresh and drops
// it before any proxy registers there. A template holds it; nothing else
// does. Only its owner, a superuser, can drop it.
const TemplateMarker = Schema + ".template_copy"

// reseedSQL gives a copy of a template database its own install-time
// values, as a fresh install would compute them, and drops the marker.
var reseedSQL = func() string {
	var b strings.Builder
	for _, v := range installTimeValues {
		if table, column, ok := strings.Cut(v.key, "."); ok {
			b.WriteString("UPDATE " + Schema + "." + table + " SET " + column + " = " + v.expr + ";\n")
		} else {
			b.WriteString("SELECT pg_catalog.setval('" + Schema + "." + v.key + "', " + v.expr + ", true);\n")
		}
	}
	b.WriteString("DROP TABLE " + TemplateMarker + ";\n")
	return b.String()
}()

// markTemplateSQL makes a database installed at SchemaVersion a template:
// each copy computes its install-time values afresh at its first Install.
// Replica mode keeps mzproxy's event triggers from taking the marker for
// a user's table.
const markTemplateSQL = "BEGIN; SET LOCAL session_replication_role = replica; CREATE TABLE " + TemplateMarker + " (); COMMIT"
