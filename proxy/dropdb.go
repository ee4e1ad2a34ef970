package proxy

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/internalconn"
)

// A client's DROP DATABASE x (a simple Query of that one statement,
// outside a transaction block, of another database than the session's)
// must not fail because of mzproxy's own connections to x: its catalog
// connection and its lease's, in this proxy and in every other one
// serving x. They are a superuser's, so PostgreSQL counts them as other
// sessions (55006) and refuses to end them for an owner's WITH (FORCE)
// (42501). Before the statement runs, the session asks its backend, as
// the client's own role, what stands in the way (dropStateSQL):
//
//   - the client may not drop x (neither its owner nor a superuser), x
//     does not exist, or other clients' sessions are in x that
//     PostgreSQL would not end for this statement (any, without FORCE):
//     the statement runs as it is, and the client gets PostgreSQL's own
//     answer (42501, 3D000 or a notice, 55006 or 42501). Nothing of
//     mzproxy's is touched.
//   - only mzproxy's own connections are in x (application_name
//     InternalApplicationName, as the backend's configured user): this
//     proxy lets go of x (closes its connections, retires its
//     incarnation: idle.go letGo), ends the other proxies' connections
//     to x with pg_terminate_backend over its own administrative
//     connection, and runs the statement. A proxy whose connection was
//     ended dials again at its next heartbeat or tick and, once x is
//     gone, gets 3D000 and lets go of x for good (lease.Lease.Gone). If
//     one dialed in before the statement ran, the statement's 55006 or
//     42501 is not shown and the whole round runs again, dropAttempts
//     times at most; the last run's answer is the client's.
//
// After a DROP that succeeded, the proxy forgets x (idle.go
// forgetDropped): a database made again under the name starts from
// scratch.

// dropAttempts bounds the runs of one client's DROP DATABASE.
const dropAttempts = 5

// dropDatabase runs a client's simple Query sql, one DROP DATABASE.
func (s *Session) dropDatabase(ctx context.Context, sql string, frame []byte) error {
	plain := unit{kind: uQuery, relayZ: true}
	name, force, ok := planner.DropDatabase(sql)
	if !ok || s.tx != txIdle || name == s.db.name {
		// PostgreSQL's own answer: 25001 in a block, 55006 for the
		// session's own database.
		return s.request(ctx, frame, plain, true)
	}
	p := s.proxy
	last := plain
	last.drop = true
	check := dropStateSQL(name, p.cfg.Backend.User, force)
	for attempt := 1; attempt < dropAttempts; attempt++ {
		state, err := s.dropState(ctx, check)
		if err != nil {
			return err
		}
		if state != "internal" {
			break
		}
		p.letGo(name)
		if err := p.endInternal(ctx, name); err != nil {
			p.log.WithError(err).WithField("database", name).Warn("mzproxy could not end its connections to a database being dropped")
			break
		}
		retry := last
		retry.dropRetry = true
		s.dropFailed = false
		if err := s.request(ctx, frame, retry, true); err != nil {
			return err
		}
		if !s.attemptRefused {
			s.dropped(name)
			return nil
		}
		s.attemptRefused = false
	}
	s.dropFailed = false
	if err := s.request(ctx, frame, last, true); err != nil {
		return err
	}
	s.dropped(name)
	return nil
}

// dropBusyWait is how long a DROP DATABASE waits for other clients'
// sessions in the database to go before it runs as written (and then
// PostgreSQL waits 5 s more for them): a client that closed its last
// session there just before may have a backend still on its way out.
const dropBusyWait = time.Second

// dropState runs check (dropStateSQL) on the session's backend, again
// every 100 ms while it says 'busy', dropBusyWait at most. A failed check
// says nothing ("").
func (s *Session) dropState(ctx context.Context, check string) (string, error) {
	deadline := time.Now().Add(dropBusyWait)
	for {
		state, err := s.be.queryValue(ctx, check)
		if err != nil {
			var pe *pgerr.Error
			if !errors.As(err, &pe) || pe.IsFatal() {
				return "", err
			}
			return "", nil
		}
		if state != "busy" || time.Now().After(deadline) {
			return state, nil
		}
		select {
		case <-ctx.Done():
			return state, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropped forgets database name after the client's DROP DATABASE, if it
// succeeded.
func (s *Session) dropped(name string) {
	if !s.dropFailed {
		s.proxy.forgetDropped(name)
	}
	s.dropFailed = false
}

// dropBlocked reports whether body, an ErrorResponse to a DROP DATABASE,
// may be mzproxy's own connections' doing: 55006 (other sessions), 42501
// (WITH (FORCE): a superuser's sessions).
func dropBlocked(body []byte) bool {
	code := errorCode(body)
	return code == "55006" || code == "42501"
}

// dropStateSQL asks, as the client's role, what stands in the way of its
// DROP DATABASE of name: 'refused' (the role may not drop it), 'busy'
// (other clients' sessions that the statement would not end:
// PostgreSQL's rules for WITH (FORCE), TerminateOtherDBBackends),
// 'internal' (only the proxies' own connections, as role proxyRole), or
// 'free'; no row: there is no such database. Any role can read what it
// reads (pg_stat_activity's datid, usesysid and application_name are not
// restricted; backend_type is, and is null for other roles' sessions).
func dropStateSQL(name, proxyRole string, force bool) string {
	forceSQL := "false"
	if force {
		forceSQL = "true"
	}
	var b strings.Builder
	b.WriteString(`SELECT CASE
  WHEN NOT pg_catalog.pg_has_role(d.datdba, 'USAGE') THEN 'refused'
  WHEN EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
                WHERE a.datid = d.oid AND a.pid <> pg_catalog.pg_backend_pid()
                  AND a.usesysid IS NOT NULL AND coalesce(a.backend_type, 'client backend') = 'client backend'
                  AND NOT (a.usename IS NOT DISTINCT FROM `)
	b.WriteString(quoteLiteral(proxyRole))
	b.WriteString(` AND a.application_name IS NOT DISTINCT FROM `)
	b.WriteString(quoteLiteral(InternalApplicationName))
	b.WriteString(`)
                  AND (NOT `)
	b.WriteString(forceSQL)
	b.WriteString(`
                       OR EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = a.usesysid AND r.rolsuper)
                          AND NOT pg_catalog.current_setting('is_superuser')::bool
                       OR NOT pg_catalog.pg_has_role(a.usesysid, 'USAGE')
                          AND NOT pg_catalog.pg_has_role('pg_signal_backend', 'USAGE'))) THEN 'busy'
  WHEN EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
                WHERE a.datid = d.oid AND a.usename = `)
	b.WriteString(quoteLiteral(proxyRole))
	b.WriteString(` AND a.application_name = `)
	b.WriteString(quoteLiteral(InternalApplicationName))
	b.WriteString(`) THEN 'internal'
  ELSE 'free'
END FROM pg_catalog.pg_database d WHERE d.datname = `)
	b.WriteString(quoteLiteral(name))
	return b.String()
}

// endInternalSQL ends mzproxy's own connections to database $1 (of every
// proxy: they connect as the backend's configured user, this
// connection's), waiting a moment for each to be gone.
const endInternalSQL = `
SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(a.pid, 2000))
  FROM pg_catalog.pg_stat_activity a
 WHERE a.datname = $1 AND a.usename = current_user AND a.application_name = $2
   AND a.pid <> pg_catalog.pg_backend_pid()`

// endInternal ends every proxy's own connections to database name, over
// this proxy's administrative connection to its default database. Call
// it only once the client's right to drop name is known.
func (p *Proxy) endInternal(ctx context.Context, name string) error {
	return p.database(p.defaultDatabase()).with(ctx, p, internalconn.Idempotent, func(conn *pgx.Conn) error {
		var n int64
		return conn.QueryRow(ctx, endInternalSQL, name, InternalApplicationName).Scan(&n)
	})
}

// dropDatabaseExtended runs the Execute (frame) of a client's DROP
// DATABASE sent in the extended protocol, portal p, as the batch's first
// Execute outside a transaction block: as dropDatabase does for a simple
// Query, the proxies' own connections to the database are let go of first,
// when they are all that stands in the way. The check is a simple Query,
// which ends the batch's implicit transaction (and with it the client's
// portal) and replaces the unnamed statement: the proxy then parses the
// client's unnamed statement again and sends its Bind again, without
// showing their answers, before the Execute. Unlike the simple Query, the
// statement runs once: a proxy that dials into the database meanwhile
// makes it fail (55006).
func (s *Session) dropDatabaseExtended(ctx context.Context, frame []byte, p *portal) error {
	name, force, ok := planner.DropDatabase(p.stmt.sql)
	if !ok || name == s.db.name {
		s.batchExecuted = true
		return s.request(ctx, frame, unit{kind: uExecute}, false)
	}
	if s.units.len() > 0 {
		if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
			return s.lost(err)
		}
		if err := s.exchange(ctx); err != nil {
			return err
		}
	}
	s.batchExecuted = true
	if s.skipping {
		// What came before failed: the backend skips the Execute.
		return s.request(ctx, frame, unit{kind: uExecute}, false)
	}
	px := s.proxy
	state, err := s.dropState(ctx, dropStateSQL(name, px.cfg.Backend.User, force))
	if err != nil {
		return err
	}
	if state == "internal" {
		px.letGo(name)
		if err := px.endInternal(ctx, name); err != nil {
			px.log.WithError(err).WithField("database", name).Warn("mzproxy could not end its connections to a database being dropped")
		}
	}
	if p.stmtName == "" {
		if err := s.internalMsg(&pgproto3.Parse{Query: p.stmt.sql}, uParse); err != nil {
			return err
		}
	}
	if err := s.be.w.WriteFrame(p.bind); err != nil {
		return s.lostWrite(err)
	}
	s.units.push(unit{kind: uBind, disp: swallow})
	return s.request(ctx, frame, unit{kind: uExecute, dropOf: name}, false)
}
