// Package proxy is mzproxy's adapter core: it opens a backend connection for
// each client session and sequences the session's statements against it,
// giving the backend Materialize's consistency model (timestamp oracle,
// read holds, managed history tables, writes timestamped at commit, leases).
//
// # A message's path
//
// The frontend calls Session.Handle for each client message, on the
// connection's goroutine, one message at a time: that call is the
// session's sequencer. A message goes through these stages:
//
//  1. Idle reader stopped (session.go). Between messages a session that
//     LISTENs, or that idles in a transaction with read holds (after
//     idleWatchDelay: a timer until then), has a goroutine reading the
//     backend; Handle stops it (or its timer) first, so that from here
//     on the connection's goroutine alone reads the backend.
//  2. Statement (deadline.go). handleStatement opens the statement at its
//     first message (its budget: statement_timeout from the tracked
//     settings) and hands the message a context that ends at the deadline
//     or at the client's CancelRequest; when it ends, the backend is sent
//     a CancelRequest and the proxy's own waits stop with 57014.
//  3. Dispatch (relay.go, handle). Two states take every message first: a
//     held optimistic batch (write.go, holdBatch) and a transaction whose
//     read holds were lost (leases.go, failLostHold). Then one handler per
//     message type: handleQuery, handleParse, handleBind, handleDescribe,
//     handleExecute, Close, Sync, Flush and COPY.
//  4. Plan. A handler decides the message's path from the query text (the
//     planner, cached): answered by the proxy (SHOW, EXPLAIN TIMESTAMP,
//     SET of mzproxy's settings), the explicit-timestamp path (reads AS OF
//     or of history: timestamp.go, explicit_extended.go, a read hold taken
//     and the read rewritten to that timestamp; a simple Query outside a
//     block goes in one round trip behind a guard of the proxy's own,
//     seen_read.go), a write (its write slot,
//     and for an autocommit statement the retry loop, relay.go writeQuery
//     and write.go), or
//     forwarded as it is. Parse and Bind make the statement's and the
//     portal's records here (statements.go), so that Execute knows its
//     path without parsing again.
//  5. Forward. The client's message and any of the proxy's own (the write slot
//     before a write, the timestamp parameter of a
//     rewritten read) are queued as units (relay.go): one per request
//     whose answers are awaited, with its disposition (the client's answers
//     are relayed, the proxy's swallowed, but for an error the client must
//     see). The pin of a fresh read-only transaction rides in front of
//     its first plain read, behind a guard whose answers are read before
//     the read's (pin_read.go).
//  6. Exchange (relay.go, exchange). When the client waits for answers
//     (Sync, Query, Flush, or a full pipeline), the backend's answers are
//     read, each owned by the unit at the head of the queue: relayed or
//     dropped, followed (ReadyForQuery's transaction status,
//     CommandComplete's effect on settings and prepared statements, an
//     error's skip to Sync), and the unit popped when its last answer
//     came. A COPY hands the turn back to the client until its data are
//     in.
//
// Between messages, a session idle in a plain state may lend its sockets to
// the event loop (evloop.go, package frontend/evloop), whose goroutine
// calls Admit and Answer while the connection's goroutine waits: plain
// reads are forwarded as they are, a simple Query that is a timestamped
// read goes out guarded as guardedQuery sends it, a named prepared one's
// Bind to Sync as guardedBind sends it (loop_read.go), and a
// simple-protocol read-only transaction is served whole, its first read
// behind its pin guard (loop_txn.go); anything the loop cannot finish
// comes back to Handle before any of its answers is relayed.
//
// Every read of the session's backend goes through backend.next, on every
// path (the exchange, the write loop, the proxy's own value queries,
// the idle reader): asynchronous messages (NotificationResponse,
// ParameterStatus) are relayed to the client as they arrive and never
// dropped. A NoticeResponse belongs to the statement that raised it: the
// client sees those of its own statements only. A FATAL ErrorResponse ends
// the session on every path, after the client has it.
//
// # Who owns what
//
// Session's state is in owned parts, all owned by the connection's
// goroutine (inside Handle and Close) unless said otherwise:
//
//   - relayState: the two connections, the unit queue and how answers are
//     relayed (muted, skipping, copy). The idle reader goroutine reads the
//     backend only while no message is being handled, and writes to the
//     client under clientMu; Handle stops it (a read deadline) and waits
//     for it before going on. busy is read by the connection-context
//     watcher (abandon), which may run on any goroutine.
//   - txnState: the backend's transaction status (txStatus, from the last
//     ReadyForQuery), the write slot held, the read-only transaction's
//     timestamp and holds (txn.go), and the portals' read holds.
//   - knownSession: what the proxy knows of the backend session's
//     settings without asking (the search_path, the transaction defaults;
//     known.go), forgotten when a statement's text may change them.
//   - statementState: the tracked settings, the statement's budget and
//     context. Cancel runs on the frontend's cancel goroutine: it calls
//     stmtCancel, under stmtMu; the context's end then sends the
//     backend's CancelRequest from the context's AfterFunc goroutine
//     (inStatement and backendCanceled are atomic for it). Between the
//     messages of a COPY FROM STDIN (copyWaiting) Cancel sends it itself;
//     while an Execute waits for its batch's Sync (executeQueued) it marks
//     the batch canceled (batchCanceled), which the batch's next exchange
//     carries to the backend behind the Execute.
//   - ownStatements: the proxy's own prepared statements on the backend
//     connection (mzproxy_*), which never take a client's name.
//   - stmts and portals: the client's prepared statements and portals,
//     one record each, with PostgreSQL's lifetimes (statements.go).
//
// Shared across sessions, and safe for concurrent use: the Proxy's
// planner cache, occ semaphore and statistics, and each database's
// oracle, catalog snapshot, read holds and lease (database.go, holds.go,
// leases.go).
package proxy
