// Package timeouts decides how long a statement may run, and what the client
// is told when it may not run any longer.
//
// It is the one place that knows PostgreSQL's time-valued settings
// (statement_timeout, lock_timeout, idle_in_transaction_session_timeout,
// idle_session_timeout): how their text is parsed and shown, which of a
// session's layered values is in force, and how the value in force becomes a
// statement's deadline and, when that passes or the client cancels, a
// SQLSTATE error.
//
// # Why the package is pure
//
// Nothing here reads the clock or does I/O: the time a statement started
// and the settings text come in as parameters. That keeps every rule (a
// rounding, a rollback of a SET, the precedence of layers) testable with
// tables and replayable scripts, and keeps the one clock the proxy uses in
// the caller's hands. The only exception is WithStatementDeadline, which
// builds a context; the context package arms its own timer.
//
// # Parsing and showing
//
// Parse accepts exactly what PostgreSQL 15 accepts for these settings
// (integer or float, optional case-sensitive unit us, ms, s, min, h, d,
// rounding to whole milliseconds half to even) and rejects the rest with
// PostgreSQL's SQLSTATE 22023 message and hint. Format prints a value as
// SHOW does. parse_test.go lists the cases checked against a real server.
//
// # Precedence
//
// For each setting the value in force is the first one present of:
//
//  1. SET LOCAL (until the end of the transaction block);
//  2. SET (for the session; RESET removes it);
//  3. SourceStartup: the client's StartupMessage, its options string (see
//     ParseStartupOptions) and parameters sent directly, the latter applied
//     after the former as PostgreSQL does;
//  4. SourceBackend: the role and database defaults (ALTER ROLE/DATABASE ...
//     SET) the backend applies at connection start;
//  5. SourceConfig: mzproxy's configured default;
//  6. 0, disabled, PostgreSQL's built-in default.
//
// RESET and SET ... TO DEFAULT fall back to the highest of layers 3 to 5.
//
// # Transactions
//
// Settings follows PostgreSQL's GUC rules for transaction blocks: a SET made
// in a block that rolls back is undone; SET LOCAL ends with the block either
// way; a SET after a SET LOCAL in the same block overrides both; ROLLBACK TO
// SAVEPOINT undoes what was set after the savepoint, RELEASE keeps it. The
// caller reports block boundaries (Begin for BEGIN or the implicit block of
// a multi-statement Query, Commit, Rollback, and the savepoint calls); a
// COMMIT of a failed block must be reported as Rollback. Not handled:
// PREPARE TRANSACTION (treat it as Commit; PostgreSQL does the same for
// settings), and function-level SET clauses (CREATE FUNCTION ... SET), which
// run inside the backend.
//
// # Statements
//
// A statement gets one deadline: Deadline(arrival, Effective(StatementTimeout)).
// All its phases (plan, semaphore wait, timestamp, upper wait, hold, OCC
// attempt, execute, stream) share it. (PostgreSQL 13 and later give each
// statement of a multi-statement Query its own deadline; the proxy gives
// the whole Query one.) A Budget
// carries the deadline and records the phase; WithStatementDeadline makes
// the statement's context, whose cause (Timeout or, through Cancel,
// UserCancel) tells the two apart; Budget.Err turns an ended context into
// PostgreSQL's error. The phase is never shown to the client (the text is
// PostgreSQL's), but is kept in the error as an *Interruption. The proxy
// stops work the backend is doing for an interrupted statement with a
// CancelRequest to the backend (proxy/deadline.go).
package timeouts
