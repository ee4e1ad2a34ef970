package storage

// IntrospectionSchema holds mzproxy's introspection views
// (mz_internal.mz_frontiers, ...), named after Materialize's.
const IntrospectionSchema = "mz_internal"

// DumpHiddenSchemas are the schemas a pg_dump through the proxy must not
// see: everything in them is mzproxy's and is installed again by the
// proxy that serves the database a dump is restored into.
var DumpHiddenSchemas = []string{Schema, IntrospectionSchema}

// DumpReloptions is an SQL expression (text[]) for pg_dump's reading of
// <rel>.reloptions, rel being a quoted alias of pg_catalog.pg_class: the
// relation's options, plus option=<ms>ms when rel is a live managed table
// with RETAIN HISTORY. pg_dump writes it into CREATE TABLE ... WITH
// (option='<ms>ms'), which the proxy turns back into RETAIN HISTORY when
// the dump is restored through it. catalog and collections are readable
// by every role.
func DumpReloptions(rel, option string) string {
	return "pg_catalog.array_cat(" + rel + ".reloptions, (SELECT pg_catalog.array_agg(" +
		quoteLiteral(option+"=") + " || k.retain_ms || 'ms') FROM " + Schema + ".catalog g JOIN " +
		Schema + ".collections k ON k.id = g.id WHERE g.oid = " + rel +
		".oid AND g.dropped_ts IS NULL AND k.retain_ms IS NOT NULL))"
}
