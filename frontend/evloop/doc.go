// Package evloop is an event loop for mzproxy's pass-through read path.
//
// Go reads a socket before it waits on it: each wait for a client's next
// statement or for the backend's answer costs a read that finds nothing,
// a netpoller wake-up and the scheduler's work, more than the proxy's own
// code for a point read. A session idle in a plain state (no transaction,
// nothing queued, no COPY, no LISTEN, no holds, no TLS, no statement
// timeout: the proxy's Session.LoopReady) can instead be driven by a Loop:
// one goroutine with its own epoll set (not locked to its thread: see
// Loop.run), which takes the session's two sockets out of Go's netpoller
// (Conn.detach) and, for each client batch the session admits (a Query,
// or Parse/Bind/Describe/Execute/Sync of a plain read), does one read and
// one write each way.
//
// A batch the session sends as bytes of its own (Admit's send: a
// timestamped read behind the session's guard) has its answer held: the
// frames the session drops (Verdict Drop: its own statements' answers) are
// not relayed, and the session may take its sockets back at any of them
// (Verdict Back), before anything of the answer reached the client, with
// the answer read so far (Peer.Unread) and the client's batch
// (Result.Leftover). A frame of the client's may be held too (Verdict
// Hold), relayed with the next frame relayed, or given back at a Back
// (a parsed read's ParseComplete until its Bind's answer shows that the
// proxy's statement was there).
//
// Anything else gives the sockets back to the session's goroutine (Run
// returns) with the client bytes read and not forwarded, and the normal
// path goes on as if the loop had never been involved: a batch the
// session does not admit, a pipeline, a batch that grows past the batch
// limit, something the backend sends unasked, a drain or a close (a
// deadline set or Close called on a detached Conn). The loop never waits
// for more of a batch when its client may be waiting for an answer: a
// message that cannot be part of a forwarded batch goes back at its type
// byte (a Flush, as in asyncpg's unsynced prepare, a FunctionCall, a
// Terminate, an unknown type), and one the connection refuses at once
// goes back as soon as that shows (a length over --max-message-size at
// its header, a body it cannot decode when whole: Peer.Readable). A
// client that goes away while its batch is at the backend gets the
// backend's work stopped (Peer.Abandon, on its own goroutine so the other
// sessions do not wait for its CancelRequest); a client that reads slowly
// makes the loop stop reading the backend until it has caught up.
//
// Per point read the loop makes the system calls PgBouncer makes (a read
// and a write each way, and a share of an epoll_wait) and no others: its
// sockets are non-blocking, so it reads and writes them without telling
// Go's scheduler (RawSyscall), and it watches a socket for writability
// only once a write to it came up short (a Unix socket reports it each
// time its peer reads, which would wake the loop for nothing).
//
// Between turns in the loop, a Conn's own reads and writes (the session's
// goroutine serving a transaction, or anything else the loop does not
// forward) make the same raw system calls, inside the socket's RawConn,
// which still waits in Go's netpoller when the socket is not ready and
// keeps its deadlines and Close (rawio.go): net.Conn's Read and Write
// would enter the scheduler's system-call state around each, and a
// loopback write often lasts long enough for sysmon to hand the P to
// another thread.
package evloop
