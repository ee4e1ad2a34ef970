// Package frontend is mzproxy's PostgreSQL wire-protocol server. It knows
// the protocol, not SQL: what a statement means is decided by the Handler
// and its Sessions (the proxy), which the frontend only calls through the
// interfaces in handler.go.
//
// # Lifecycle of a connection
//
// Each accepted connection has one goroutine, which owns the socket, the
// message reader and writer, and the Session. It goes through these phases:
//
//  1. Accept. Serve accepts and registers the connection, issuing its
//     process id and secret key (the BackendKeyData the client will use to
//     cancel). During a drain a new connection gets FATAL 57P03.
//  2. Negotiate. Untyped startup packets, within AuthTimeout: SSLRequest is
//     answered 'S' and TLS is started when a certificate is configured, else
//     'N'; GSSENCRequest is answered 'N'; a CancelRequest is routed to the
//     session its key names (a wrong key does nothing) and the connection
//     closes without an answer, as PostgreSQL does.
//  3. Startup. The StartupMessage (protocol 3.0; a newer 3.x minor version or
//     _pq_ options get NegotiateProtocolVersion) names user, database,
//     application_name, options. Refused here: no user (28000), too many
//     sessions (53300: a place among MaxConnections is taken here with a
//     compare-and-swap, before authentication, and given back when the
//     connection ends), a drain in progress (57P03).
//  4. Authenticate. trust: nothing. scram-sha-256: a SCRAM exchange against
//     the users file (28P01 on failure; a user the file does not have runs
//     the whole exchange against a mock verifier and fails at the proof, as
//     in PostgreSQL, so that users cannot be enumerated). passthrough: the
//     Handler relays its backend's own exchange through an AuthRelay.
//  5. Open. Handler.Connect opens the Session (its backend connection); then
//     AuthenticationOk, the backend's ParameterStatus values, BackendKeyData
//     and ReadyForQuery('I').
//  6. Serve. Each client message is framed (length checked against
//     MaxMessageSize), decoded (an unknown type or malformed body is a
//     protocol violation; a Query or Parse is read as PostgreSQL reads it,
//     and one it cannot read gets its ERROR 08P01, see failMalformed) and
//     passed to Session.Handle, which writes the
//     responses. An ERROR from Handle is sent as ErrorResponse, followed by
//     ReadyForQuery for a Query, or by skipping to the next Sync for the
//     extended protocol. While Handle runs, a watchdog checks once a second
//     that the client is still connected.
//  7. Terminate. The connection ends, the Session is closed (which stops its
//     backend work) and one log line records the duration and the reason.
//
// # How a connection ends
//
//   - The client sends Terminate or closes its socket.
//   - A protocol violation: FATAL 08P01 (a malformed startup packet, a length
//     field below 4 or above the limit, an unknown message type, a malformed
//     body other than the Query or Parse answered with an ERROR), then
//     close. Other connections are not affected.
//   - Authentication fails: FATAL 28P01/28000; the startup phase exceeds
//     AuthTimeout: closed without a word (PostgreSQL logs "incomplete startup
//     packet").
//   - The Session ends it: a FATAL error (the backend connection was lost,
//     08006), or the backend's own FATAL error relayed (e.g. 57P01 when the
//     backend was terminated), after which the frontend closes quietly.
//   - The client disappears during a statement: the watchdog notices and
//     cancels the connection's context, which makes the Session cancel its
//     backend query.
//   - Shutdown: idle sessions get FATAL 57P01 at once; busy ones when their
//     current message is done; when the drain deadline passes, the rest are
//     cut (context canceled, socket closed).
//   - A panic in a session is recovered, logged, answered with FATAL XX000,
//     and ends only that connection.
package frontend
