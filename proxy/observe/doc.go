// Package observe watches statements as the proxy runs them: per statement
// it times the phases the statement goes through, records them in metrics,
// optionally as an OpenTelemetry trace, logs statements slower than a
// threshold, and keeps each session's current state for SHOW
// mzproxy_sessions.
//
// # The statement model
//
// A statement is one client request cycle: from the first message that
// asks for work (Query, Parse, Bind, Describe, Execute, FunctionCall) to
// the ReadyForQuery that answers it. Its phases are sequential: the
// session says which phase it enters ([Session.Phase]) and the observer
// closes the previous one. A phase entered twice (a Parse then a Bind on
// the explicit-timestamp path) adds up. Phases:
//
//	plan        classifying and rewriting the statement
//	timestamp   choosing the timestamp (oracle, sinces, AS OF evaluation)
//	upper_wait  waiting for the upper to pass the chosen timestamp
//	holds       acquiring read holds
//	backend     the backend executing and the answers streaming back
//	occ_wait    waiting for a slot to run an optimistic write loop in
//	occ_attempt an optimistic write attempt: the slot, the statement and
//	            the backend's commit of them, one round trip
//	commit      an optimistic write's separate COMMIT (the test-only
//	            failpoint's attempt only)
//
// # Cost
//
// A session's statement owns its state and runs on its session's
// goroutine; nothing is locked on the way. What other goroutines read
// (the SHOW view) is kept in atomics. Without a tracer no span is made;
// metric attribute sets are made once, not per statement.
//
// # What is never recorded
//
// Metric labels are the statement kind (the planner's, a fixed set), the
// outcome, the phase and the SQLSTATE class. Logs carry the statement's
// text only at or above the slow threshold, and never Bind parameter
// values.
package observe
