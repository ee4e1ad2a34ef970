package proxy

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// LoadCatalog makes sure the proxy can serve the backend's default
// database (--backend's): its backend schema is installed (installing it
// if missing, as a session's start would) and its catalog loads. It is
// readiness's "catalog loaded".
func (p *Proxy) LoadCatalog(ctx context.Context) error {
	name := p.cfg.Backend.Database
	if name == "" {
		name = p.cfg.Backend.User
	}
	db := p.database(name)
	_, _, err := db.snapshot(ctx, p)
	if !undefinedTable(err) {
		return err
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
