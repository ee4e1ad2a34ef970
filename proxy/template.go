package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// A template database saves a new database mzproxy's install: a client's
// CREATE DATABASE that names no template of its own copies templateDB, a
// copy of template1 with mzproxy's schema installed, instead of template1
// (copying costs what copying template1 does; the install, about 0.12 s
// of backend CPU and 285 statements, is gone: docs/corpus-cost.md). The
// copy's install-time values (write key, clock) are the template's until
// the first proxy that registers there computes them afresh
// (storage.TemplateMarker): no two databases share them.
//
// The template is made by an administrative connection (a superuser's:
// the install needs one) as templateNext, a copy of template1, then
// frozen (no connections: nobody, superuser or not, can change it or
// keep a copy from being made with 55006; a template: any role with
// CREATEDB may copy it, as it may copy template1) and put in place of the
// previous one by renaming both in one transaction. Its comment records
// what it was made from (templateSourceSQL): SchemaVersion and what
// PostgreSQL shows of template1 (its oid, row version and tablespace in
// pg_database; in its statistics the client sessions it had and the rows
// inserted, updated and deleted in it, catalogs' rows included). Whatever
// changes what a copy of template1 gets writes rows there, from a client
// session in it, so a different record means template1 may have changed
// (a session that only looked is enough), and the template is made
// again; until it is, CREATE DATABASE copies template1 as the client
// asked and the proxy installs its schema at the first connection, as
// before the template. Autovacuum's visits are not counted: its
// transactions are (xact_commit), which would make the template again
// every minute. With track_counts off nothing is counted, and the
// template is not used. A database of the template's name that a
// superuser does not own is not mzproxy's: never copied, dropped or
// replaced.
const (
	templateDB   = storage.Schema + "_template"
	templateNext = templateDB + "_next"
	templateOld  = templateDB + "_old"
)

// templateSourceSQL is the record of template1 a template is made from,
// and whether a session is in template1 now (a copy of it would then fail
// with 55006, and it may be changing).
var templateSourceSQL = `
SELECT pg_catalog.format('mzproxy storage %s; template1 %s %s %s %s %s %s %s %s', ` + strconv.Itoa(storage.SchemaVersion) + `,
         t.oid, t.xmin, t.dattablespace, s.sessions, s.tup_inserted, s.tup_updated, s.tup_deleted, s.stats_reset) AS source,
       s.numbackends > 0 OR NOT pg_catalog.current_setting('track_counts')::bool AS busy
  FROM pg_catalog.pg_database t JOIN pg_catalog.pg_stat_database s ON s.datid = t.oid
 WHERE t.datname = 'template1'`

// templateStateSQL says what a client's CREATE DATABASE is to copy: 'use'
// the template; 'build' it (it is missing or stale: the statement copies
// template1 meanwhile); 'skip' it (template1 is in use, a copy of it
// fails as PostgreSQL says; or the name is another owner's, or the
// template is a newer proxy's). Any role can read what it reads.
var templateStateSQL = `
SELECT CASE
         WHEN t.busy THEN 'skip'
         WHEN d.oid IS NULL THEN 'build'
         WHEN NOT r.rolsuper THEN 'skip'
         WHEN d.datistemplate AND NOT d.datallowconn
              AND pg_catalog.shobj_description(d.oid, 'pg_database') = t.source THEN 'use'
         WHEN coalesce(substring(pg_catalog.shobj_description(d.oid, 'pg_database')
                                 FROM '^mzproxy storage (\d+);')::int, 0) > ` + strconv.Itoa(storage.SchemaVersion) + ` THEN 'skip'
         ELSE 'build'
       END
  FROM (` + templateSourceSQL + `) t
  LEFT JOIN pg_catalog.pg_database d ON d.datname = '` + templateDB + `'
  LEFT JOIN pg_catalog.pg_roles r ON r.oid = d.datdba`

// templateRetry is how long a proxy waits before it tries again to make
// the template after a failure (another proxy making it at the same time
// is one).
const templateRetry = 10 * time.Second

// templates is the proxy's making of the template database: one at a
// time, in the background.
type templates struct {
	mu       sync.Mutex
	building bool
	retryAt  time.Time
	stop     context.CancelFunc
	wg       sync.WaitGroup
	closed   bool
}

// createDatabase runs a client's simple Query sql, one CREATE DATABASE
// outside a transaction block, copying the template when sql names no
// template of its own and the template is current. If the copy fails for
// any reason but a cancel, the client's statement runs as it wrote it,
// and the client sees only that statement's answers (PostgreSQL's own).
func (s *Session) createDatabase(ctx context.Context, sql string, frame []byte) error {
	original := unit{kind: uQuery, relayZ: true}
	if s.tx != txIdle || s.proxy.cfg.NoTemplate {
		return s.request(ctx, frame, original, true)
	}
	copySQL, name, ok := planner.WithTemplate(sql, templateDB)
	if !ok {
		return s.request(ctx, frame, original, true)
	}
	state, err := s.be.queryValue(ctx, templateStateSQL)
	if err != nil {
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.IsFatal() {
			return err
		}
		// A failed look (a canceled one) is a template not used.
		state = ""
	}
	switch state {
	case "build":
		s.proxy.buildTemplate()
		fallthrough
	default:
		return s.request(ctx, frame, original, true)
	case "use":
	}
	copyFrame, err := (&pgproto3.Query{String: copySQL}).Encode(nil)
	if err != nil {
		return err
	}
	s.templateCopied = false
	if err := s.request(ctx, copyFrame, unit{kind: uQuery, relayZ: true, templateCopy: true}, true); err != nil || !s.attemptRefused {
		if err == nil && s.templateCopied {
			s.proxy.copiedTemplate(name)
		}
		s.templateCopied = false
		return err
	}
	s.attemptRefused = false
	return s.request(ctx, frame, original, true)
}

// copyRefusedBy reports whether an error to a copy of the template is one
// the client's own statement may not get (any but a cancel or the end of
// the session): the client's statement then runs instead.
func copyRefusedBy(body []byte) bool {
	code := errorCode(body)
	severity, _ := errorField(body, 'V')
	return len(code) == 5 && code[:2] != "57" && code[:2] != "08" && severity != "FATAL" && severity != "PANIC"
}

// buildTemplate makes the template database in the background, unless it
// is being made or failed a moment ago.
func (p *Proxy) buildTemplate() {
	t := &p.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.building || t.closed || time.Now().Before(t.retryAt) {
		return
	}
	t.building = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.stop = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer cancel()
		err := p.makeTemplate(ctx)
		t.mu.Lock()
		t.building = false
		if err != nil {
			t.retryAt = time.Now().Add(templateRetry)
		}
		t.mu.Unlock()
		if err != nil {
			p.log.WithError(err).Warn("mzproxy could not make its template database; new databases get the schema installed at their first connection")
			return
		}
		p.log.WithField("database", templateDB).Info("made the template database of new databases")
	}()
}

// closeTemplates stops a template being made and waits for it.
func (p *Proxy) closeTemplates() {
	t := &p.templates
	t.mu.Lock()
	t.closed = true
	if t.stop != nil {
		t.stop()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// errTemplate1Busy: a session is in template1, which cannot be copied.
var errTemplate1Busy = errors.New("template1 is in use")

// makeTemplate makes the template database from template1 as it is now
// and puts it in place of the previous one.
func (p *Proxy) makeTemplate(ctx context.Context) error {
	conn, err := p.adminConn(ctx, p.cfg.Backend.Database)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	exec := func(sql string) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}
	var source string
	var busy bool
	if err := conn.QueryRow(ctx, templateSourceSQL).Scan(&source, &busy); err != nil {
		return err
	}
	if busy {
		return errTemplate1Busy
	}
	// A template left by a build that stopped half-way; a build of
	// another proxy's running now makes this one fail (55006 or 3D000),
	// or that one.
	if err := dropOwnDatabase(ctx, conn, templateNext); err != nil {
		return err
	}
	if err := exec("CREATE DATABASE " + templateNext + " TEMPLATE template1"); err != nil {
		return err
	}
	next, err := p.adminConn(ctx, templateNext)
	if err != nil {
		return err
	}
	err = storage.InstallTemplate(ctx, next)
	if err == nil {
		err = compactTemplate(ctx, next)
	}
	next.Close(context.Background())
	if err != nil {
		return err
	}
	// The rename below waits (up to 5 s, PostgreSQL's own wait) for the
	// install's backend to exit.
	for _, sql := range []string{
		"ALTER DATABASE " + templateNext + " WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
		"REVOKE ALL ON DATABASE " + templateNext + " FROM PUBLIC",
		"COMMENT ON DATABASE " + templateNext + " IS " + quoteLiteral(source),
	} {
		if err := exec(sql); err != nil {
			return err
		}
	}
	if err := dropOwnDatabase(ctx, conn, templateOld); err != nil {
		return err
	}
	// Both renames in one transaction: a client's copy finds the old
	// template or the new one, never none. A rename waits for copies
	// being made of the database it renames.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The name may have been taken since the client's statement
		// looked: a database a role with CREATEDB made meanwhile is its
		// owner's, not to be renamed.
		var super bool
		err := tx.QueryRow(ctx, `SELECT r.rolsuper FROM pg_catalog.pg_database d
  JOIN pg_catalog.pg_roles r ON r.oid = d.datdba WHERE d.datname = $1`, templateDB).Scan(&super)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case !super:
			return fmt.Errorf("database %q is not mzproxy's (no superuser owns it)", templateDB)
		default:
			if _, err := tx.Exec(ctx, "ALTER DATABASE "+templateDB+" RENAME TO "+templateOld); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "ALTER DATABASE "+templateNext+" RENAME TO "+templateDB)
		return err
	})
	if err != nil {
		return err
	}
	return dropOwnDatabase(ctx, conn, templateOld)
}

// compactSQL lists the template's own tables (not the cluster's shared
// catalogs, which a copy does not take, and whose VACUUM FULL would lock
// every database's connections out while it ran).
const compactSQL = `SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', ')
  FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'm') AND NOT c.relisshared`

// compactTemplate rewrites the template's tables without the row versions
// the install left dead (its catalogs' rows of the objects it replaced as
// it went through the storage versions): every CREATE DATABASE copies
// the template block by block (PostgreSQL 15's WAL_LOG strategy reads and
// WAL-logs each one), and the install had made it 8.6 MB against
// template1's 7.5 MB; compacted it is 7.4 MB (docs/corpus-cost.md,
// session 20). The template is new and nobody else may connect to it yet,
// so its tables' exclusive locks wait for no one.
func compactTemplate(ctx context.Context, conn *pgx.Conn) error {
	var tables string
	if err := conn.QueryRow(ctx, compactSQL).Scan(&tables); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "VACUUM FULL "+tables)
	return err
}

// dropOwnDatabase drops database name if it exists and a superuser owns
// it (a template of mzproxy's); a database of that name another role owns
// is an error.
func dropOwnDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	var isTemplate, super bool
	err := conn.QueryRow(ctx, `SELECT d.datistemplate, r.rolsuper FROM pg_catalog.pg_database d
  JOIN pg_catalog.pg_roles r ON r.oid = d.datdba WHERE d.datname = $1`, name).Scan(&isTemplate, &super)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	case !super:
		return fmt.Errorf("database %q is not mzproxy's (no superuser owns it)", name)
	}
	if isTemplate {
		// PostgreSQL refuses to drop a template.
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" IS_TEMPLATE false"); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, "DROP DATABASE "+name)
	return err
}
