package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/lease"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// installs serializes installing mzproxy's backend schema.
type installs struct {
	mu sync.Mutex

	// copies are the databases this proxy's sessions made as copies of
	// the template database (template.go) that no session has connected
	// to since, each with when it was made; guarded by copiesMu.
	copiesMu sync.Mutex
	copies   map[string]time.Time
}

// copyFresh is how long after its CREATE DATABASE a copy of the template
// counts as new: its first session registers the proxy there while its
// own backend starts.
const copyFresh = time.Minute

// copiedTemplate notes that a client's CREATE DATABASE through this proxy
// made database name as a copy of the template.
func (p *Proxy) copiedTemplate(name string) {
	in := &p.installs
	in.copiesMu.Lock()
	defer in.copiesMu.Unlock()
	now := time.Now()
	for n, at := range in.copies {
		if now.Sub(at) > copyFresh {
			delete(in.copies, n)
		}
	}
	if in.copies == nil {
		in.copies = map[string]time.Time{}
	}
	in.copies[name] = now
}

// takeCopy reports whether database is a copy of the template made by
// this proxy a moment ago that no session has connected to since, and
// forgets it.
func (p *Proxy) takeCopy(database string) bool {
	in := &p.installs
	in.copiesMu.Lock()
	defer in.copiesMu.Unlock()
	at, ok := in.copies[database]
	delete(in.copies, database)
	return ok && time.Since(at) <= copyFresh
}

// registerCopy registers this proxy in database, a new copy of the
// template (takeCopy), as ensureInstalled does for a database whose schema
// it finds missing (the copy's Install computes its install-time values),
// and reports whether it did. Connect runs it while the session's own
// backend starts, rather than after: a new database's first session waited
// for the lease's backend start, the copy's values and the registration one
// after another behind its own (docs/corpus-cost.md, session 17). The
// database exists and holds the schema (a client of this proxy made it from
// the template), so registering there installs nothing in a database the
// client may not connect to. A failure is left to ensureInstalled, which
// tries again and says why.
func (p *Proxy) registerCopy(ctx context.Context, database string) bool {
	p.installs.mu.Lock()
	defer p.installs.mu.Unlock()
	p.leases.Forget(database)
	if _, err := p.leases.Get(ctx, database); err != nil {
		return false
	}
	p.installed(database)
	return true
}

// ensureInstalled makes sure the session's database has mzproxy's backend
// schema (each database has its own oracle, upper and catalog), installing
// it over an administrative connection when it is missing. Writes and DDL
// go through it, so it must be there before the session's first statement.
// It checks at every session start (one short query): a database can be
// dropped and made again under the same name.
func (p *Proxy) ensureInstalled(ctx context.Context, be *backend, database string) error {
	// A copy of the template database (template.go) has the schema but
	// the template's install-time values until a registration's Install
	// computes its own: it takes the same path as a database without.
	check := fmt.Sprintf("SELECT to_regclass('%s.schema_version') IS NOT NULL AND to_regclass('%s') IS NULL", storage.Schema, storage.TemplateMarker)
	present, err := be.queryValue(ctx, check)
	if err != nil || present == "t" {
		return err
	}
	p.installs.mu.Lock()
	defer p.installs.mu.Unlock()
	// Another session may have installed it meanwhile (and registered).
	if present, err := be.queryValue(ctx, check); err != nil || present == "t" {
		return err
	}
	// The schema is missing: a lease of the database is of an earlier
	// database of that name. Registering installs the schema first, on
	// the lease's own connection: an install over a connection of its
	// own cost a backend start per new database (a sqllogictest file
	// makes one): 40-50 ms of the server's CPU on a loaded machine,
	// about a third of the install script's (docs/corpus-cost.md).
	// Registering under installs.mu keeps a
	// session that finds the schema missing meanwhile from forgetting
	// the new lease.
	p.leases.Forget(database)
	if _, err := p.leases.Get(ctx, database); err != nil {
		var ie *lease.InstallError
		var pe *pgerr.Error
		switch {
		case errors.As(err, &ie):
			return pgerr.Fatal(pgerr.InsufficientPrivilege, "mzproxy could not install its schema in database %q: %v", database, err)
		case errors.As(err, &pe) && pe.Code == pgerr.ConnectionFailure:
			return pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy could not connect to install its schema in database %q: %v", database, err)
		}
		return leaseError(err)
	}
	p.installed(database)
	return nil
}

// installed forgets what the proxy read of database before its schema
// was installed (again).
func (p *Proxy) installed(database string) {
	p.database(database).forgetCatalog()
	p.log.WithField("database", database).Info("installed mzproxy's backend schema")
}

// install installs the backend schema into database as the backend's
// configured (administrative) user, without registering there (the
// proxy's start, LoadCatalog: registering is a session's business, and a
// proxy of a newer generation fences the older ones when it registers).
func (p *Proxy) install(ctx context.Context, database string) error {
	connCfg, err := pgx.ParseConfig("")
	if err != nil {
		return err
	}
	connCfg.Config = *p.internalConfig(database)
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		return pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy could not connect to install its schema in database %q: %v", database, err)
	}
	defer conn.Close(context.Background())
	if err := storage.Install(ctx, conn); err != nil {
		return pgerr.Fatal(pgerr.InsufficientPrivilege, "mzproxy could not install its schema in database %q: %v", database, err)
	}
	p.installed(database)
	return nil
}

// queryValue runs one simple query of the proxy's own on an idle backend
// connection and returns the first column of its first row as text.
func (b *backend) queryValue(ctx context.Context, sql string) (string, error) {
	v, _, err := b.queryValueStatus(ctx, sql)
	return v, err
}

// queryValueStatus is queryValue also returning the transaction status
// that ends the query.
func (b *backend) queryValueStatus(ctx context.Context, sql string) (string, byte, error) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = b.nc.SetDeadline(deadline)
		defer b.nc.SetDeadline(time.Time{})
	}
	if err := b.w.Send(&pgproto3.Query{String: sql}); err != nil {
		return "", 0, err
	}
	if err := b.w.Flush(); err != nil {
		return "", 0, err
	}
	return b.readToReady()
}

// readToReady reads the backend's answers up to its ReadyForQuery: the
// first column of the first row as text, the transaction status, and the
// error, if one came.
func (b *backend) readToReady() (string, byte, error) {
	var (
		value  string
		gotRow bool
		failed error
	)
	for {
		typ, frame, err := b.next()
		if err != nil {
			return "", 0, connectionLost(err)
		}
		switch typ {
		case 'D':
			firstValue(frame, &value, &gotRow)
		case 'E':
			var er pgproto3.ErrorResponse
			if err := er.Decode(wire.Body(frame)); err == nil {
				failed = backendError(&er)
			}
		case 'Z':
			return value, frame[5], failed
		}
	}
}

// internalValue runs one query of the proxy's own on the session's backend
// connection between the client's extended-protocol messages, and returns
// the first column of its first row as text. It uses a named statement and
// portal of its own, because a simple Query would destroy the client's
// unnamed statement and portal. The connection must be quiesced (nothing
// of the client's awaiting an answer). If the query fails, see
// internalFailed.
//
// The statement's deadline or a cancel stops the query through the
// CancelRequest the session then sends (the backend answers 57014), not a
// socket deadline, which would leave the connection mid-answer.
func (b *backend) internalValue(ctx context.Context, sql string) (string, error) {
	values, err := b.internalValues(ctx, sql)
	if err != nil {
		return "", err
	}
	return values[0], nil
}

// canceledUnsent is the error of a query of the proxy's own whose
// statement context had ended before any of it was sent: 57014 for the
// context's cause, marked as never sent, so that a transaction's pin
// stopped so is not taken for a failure of the backend's block
// (pinFailed): the session then fails the block itself, as PostgreSQL's
// cancel of the client's statement would have (abortAfterRefusal).
func canceledUnsent(ctx context.Context) error {
	return pgerr.Wrap(pgerr.QueryCanceled, unsent{context.Cause(ctx)})
}

// unsent marks the error of a query that never reached the backend.
type unsent struct{ error }

func (u unsent) Unwrap() error { return u.error }

// valueStatement is the name of internalValues' statement and portal.
const valueStatement = "mzproxy_value"

// internalValues is internalValue for several queries in one round trip,
// run in order; the first that fails stops the rest.
func (b *backend) internalValues(ctx context.Context, sqls ...string) ([]string, error) {
	if ctx.Err() != nil {
		return nil, canceledUnsent(ctx)
	}
	closes, err := b.sendValues(sqls)
	if err != nil {
		return nil, err
	}
	if err := b.w.Send(&pgproto3.Flush{}); err != nil {
		return nil, err
	}
	if err := b.w.Flush(); err != nil {
		return nil, err
	}
	return b.readValues(len(sqls), closes)
}

// sendValues queues internalValues' messages for sqls, unflushed. closes
// is where readValues starts counting CloseCompletes: -1 when the
// statement a failed call left is closed first (closing what does not
// exist is no error, and answers CloseComplete all the same).
func (b *backend) sendValues(sqls []string) (closes int, err error) {
	if b.valueLeft {
		if err := b.w.Send(&pgproto3.Close{ObjectType: 'S', Name: valueStatement}); err != nil {
			return 0, err
		}
		b.valueLeft, closes = false, -1
	}
	for _, sql := range sqls {
		for _, m := range []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: valueStatement, Query: sql},
			&pgproto3.Bind{DestinationPortal: valueStatement, PreparedStatement: valueStatement},
			&pgproto3.Execute{Portal: valueStatement},
			&pgproto3.Close{ObjectType: 'P', Name: valueStatement},
			&pgproto3.Close{ObjectType: 'S', Name: valueStatement},
		} {
			if err := b.w.Send(m); err != nil {
				return 0, err
			}
		}
	}
	return closes, nil
}

// readValues reads the answers to n queries sendValues sent.
func (b *backend) readValues(n, closes int) ([]string, error) {
	values := make([]string, n)
	gotRow := make([]bool, n)
	for closes < 2*n {
		typ, frame, err := b.next()
		if err != nil {
			return nil, connectionLost(err)
		}
		switch typ {
		case 'D':
			firstValue(frame, &values[closes/2], &gotRow[closes/2])
		case '3':
			closes++
		case 'E':
			var er pgproto3.ErrorResponse
			_ = er.Decode(wire.Body(frame))
			return nil, b.internalFailed(backendError(&er))
		}
	}
	return values, nil
}

// internalFailed follows a failed query of internalValues, whose Closes the
// backend skipped, and returns its error. Inside the client's
// extended-protocol batch the error is the batch's: the backend skips to
// the client's own Sync, as PostgreSQL would after an error of the
// client's, and the statement is closed by the next call; a Sync of the
// proxy's would end the batch's implicit transaction, and its portals, at
// a point the client did not choose. Otherwise the proxy ends the skip
// with a Sync of its own and closes the statement.
func (b *backend) internalFailed(failed *pgerr.Error) error {
	if failed.IsFatal() {
		// The backend ended the session (e.g. 25P03): nothing more to
		// read or write.
		return failed
	}
	if b.clientBatch {
		b.valueLeft = true
		return failed
	}
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Sync{}, &pgproto3.Close{ObjectType: 'S', Name: valueStatement}, &pgproto3.Sync{}} {
		if err := b.w.Send(m); err != nil {
			return err
		}
	}
	if err := b.w.Flush(); err != nil {
		return err
	}
	for zs := 0; zs < 2; {
		typ, _, err := b.next()
		if err != nil {
			return connectionLost(err)
		}
		if typ == 'Z' {
			zs++
		}
	}
	return failed
}

// valueOwnBatch is internalValue for a backend outside a transaction
// block whose batch, if any, has no portal (no Bind answered since its
// last ReadyForQuery; a Parse, Describe or Close of the client's may
// have been): the query is a batch of its own, ended by a Sync, as if it
// had run before the client's batch (that Sync ends the implicit
// transaction the client's Parse began, and nothing of it: prepared
// statements outlive it). Run inside the client's batch, its Execute would
// put the batch in a pipeline for PostgreSQL, which then refuses a later
// DISCARD ALL or VACUUM of the batch (25001) that it runs when the batch
// sent no Execute before.
func (b *backend) valueOwnBatch(ctx context.Context, sql string) (string, error) {
	if ctx.Err() != nil {
		return "", canceledUnsent(ctx)
	}
	if _, err := b.sendValues([]string{sql}); err != nil {
		return "", err
	}
	if err := b.w.Send(&pgproto3.Sync{}); err != nil {
		return "", err
	}
	if err := b.w.Flush(); err != nil {
		return "", err
	}
	v, _, err := b.readToReady()
	if err != nil {
		// The backend skipped the Closes to the Sync.
		b.valueLeft = true
	}
	return v, err
}

// firstValue keeps the first column of the first DataRow seen.
func firstValue(frame []byte, value *string, seen *bool) {
	if *seen {
		return
	}
	*seen = true
	// Read in place (a DataRow's decoder makes a slice of every column):
	// the column count, then the first column's length and bytes.
	body := wire.Body(frame)
	if len(body) < 6 || binary.BigEndian.Uint16(body) == 0 {
		return
	}
	n := int32(binary.BigEndian.Uint32(body[2:]))
	if n >= 0 && int(n) <= len(body)-6 {
		*value = string(body[6 : 6+n])
	}
}
