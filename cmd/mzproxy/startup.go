package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/lease"
)

// The attempts to reach the backend at start are spaced firstRetry apart,
// then twice as far each time, up to maxRetry: an unreachable backend
// costs a line in the log now and then, not every second.
const (
	firstRetry = time.Second
	maxRetry   = 30 * time.Second
)

// awaitBackend makes the proxy ready to serve the backend URL's database:
// registered there (installing mzproxy's backend schema if missing; a new
// generation's registration is what fences the old one, so /readyz can
// say when this proxy is in charge) and that database's catalog loaded.
// Other databases are registered in at their first session. While the
// backend cannot be reached it logs why and tries again with backoff. It
// logs "mzproxy ready" once ready, and returns then, when the proxy is
// fenced, or when ctx ends.
func awaitBackend(ctx context.Context, px *proxy.Proxy, database string, log *logrus.Entry, fields logrus.Fields) {
	wait := firstRetry
	for attempt := 1; ; attempt++ {
		l, err := prepareBackend(ctx, px, database)
		switch {
		case err == nil:
			log.WithFields(logrus.Fields{"database": database, "incarnation": l.ID(), "generation": l.Generation()}).Info("mzproxy registered")
			log.WithFields(fields).Info("mzproxy ready")
			return
		case errors.Is(err, lease.ErrLost):
			// Fenced by a newer generation: it stays so.
			log.WithError(err).Error("mzproxy cannot register: fenced")
			return
		case loginRefused(err):
			// As with passthrough and no password in --backend: only a
			// client's login can reach the backend's databases.
			log.WithFields(fields).WithError(err).Info("mzproxy ready; the backend refuses mzproxy's own login, so it registers in a database at its first session")
			return
		case ctx.Err() != nil:
			return
		}
		log.WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retry_in": wait}).Warn("mzproxy waiting for the backend")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetry)
	}
}

// prepareBackend registers in database and loads its catalog, once.
func prepareBackend(ctx context.Context, px *proxy.Proxy, database string) (*lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogLoadTimeout)
	defer cancel()
	l, err := px.Lease(ctx, database)
	if err != nil {
		return nil, err
	}
	return l, px.LoadCatalog(ctx, true)
}

// loginRefused reports whether err is the backend refusing the proxy's own
// credentials (SQLSTATE class 28): the backend is up.
func loginRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28")
}
