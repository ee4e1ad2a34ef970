// Package slt runs sqllogictest files against any PostgreSQL-wire endpoint
// (mzproxy or PostgreSQL itself) and reports the outcome of every record, so
// that two runs can be compared record by record: mzproxy must pass exactly
// the records PostgreSQL passes.
//
// # Format
//
// Classic SQLite sqllogictest: "statement ok|error", "query <types> <sort>
// [label]" with types T, I, R, sort nosort, rowsort or valuesort,
// "hash-threshold N", "skipif|onlyif <engine>" and "halt". Lines starting
// with '#' are comments; a trailing \r is dropped. Values are rendered the
// way the original runner renders them against PostgreSQL through psqlODBC
// (see render): booleans as 1/0, an I column through atoi, an R column
// through atof and "%.3f", text with NULL, "(empty)" and '@' for bytes
// outside 0x20-0x7E. Results with more values than the hash threshold are
// compared as "<n> values hashing to <md5>"; a labelled query must hash like
// the first query with that label in the file (a skipped one counts, with
// the hash of its expected output, as in the original's verify mode).
//
// Materialize's additions: "statement count N"; "statement error <regex>"
// and "query error <regex>" (unanchored, tried on the server's message and
// on "db error: ERROR: <message>", optionally after "pgcode XXXXX");
// query options colnames and multiline (expected text up to a line "EOF"),
// also written comma-separated as Materialize does ("rowsort,colnames");
// types B (true/false) and O; "simple [conn=NAME,user=U]" over the
// simple-query protocol on a named connection; "mode cockroach|standard"
// (cockroach: one row per line, values separated by spaces, '␠' for a space
// inside a value, expected rows sorted like the result); "reset-server",
// which moves the rest of the file to a new, empty database.
//
// # Deliberate differences from the original
//
// The original only compares as many lines as the shorter of expected and
// actual; here the number of values must match. An expected block is
// accepted either as values or as a hash line, whichever it is. The
// original truncates T values at 511 bytes (its fetch buffer); here they
// are not truncated. Only an error the server reports satisfies "statement
// error": a dropped connection fails the record.
//
// # Reports
//
// Run returns a Report with per-file counts and every record's Result
// (file, line, kind, outcome, message). Diff lists the records on which two
// reports disagree, for running the same files against mzproxy and against
// PostgreSQL; Expected (ReadExpected) checks per-file counts against a
// committed file such as cmd/mzslt/testdata/sqlite-expected.txt.
//
// # Connections
//
// Each file runs on one connection (plus one per named simple connection),
// opened lazily and reopened if it breaks; by default in a database created
// for the file and dropped after it. Records are sent one at a time, one
// round trip each, over the simple or the extended protocol.
package slt
