package proxy

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/pgerr"
)

// LoadCatalog loads the catalog of the backend's default database
// (--backend's): readiness's "catalog loaded". With install, a missing
// backend schema is installed first, as a session's start would;
// without, it is an error.
func (p *Proxy) LoadCatalog(ctx context.Context, install bool) error {
	name := p.defaultDatabase()
	db := p.database(name)
	_, _, err := db.snapshot(ctx, p)
	if !undefinedTable(err) {
		return err
	}
	if !install {
		return pgerr.New(pgerr.UndefinedTable, "mzproxy's schema is not installed in database %q (a session's start installs it)", name)
	}
	p.installs.mu.Lock()
	err = p.install(ctx, name)
	p.installs.mu.Unlock()
	if err != nil {
		return err
	}
	_, _, err = db.snapshot(ctx, p)
	return err
}

// undefinedTable reports whether err is PostgreSQL's 42P01: the backend
// schema is not there.
func undefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
