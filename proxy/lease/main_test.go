package lease

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// server is the PostgreSQL the package's tests share; each test gets its
// own database.
var server *embedded.Server

func TestMain(m *testing.M) { os.Exit(embeddedtest.Main(m, "lease", &server)) }

var dbSeq atomic.Int64

// db is a fresh database with mzproxy's schema.
type db struct {
	t    testing.TB
	cs   string
	conn *pgx.Conn
}

func newDB(t testing.TB) *db {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("ls%d_%d", os.Getpid(), dbSeq.Add(1))
	admin := connect(t, server.ConnString("postgres", "postgres"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	d := &db{t: t, cs: server.ConnString("postgres", name)}
	d.conn = connect(t, d.cs)
	if err := storage.Install(ctx, d.conn); err != nil {
		t.Fatal(err)
	}
	return d
}

func connect(t testing.TB, cs string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// quiet discards the leases' warnings (expected in these tests).
var quiet = func() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(discard{})
	return l
}()

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// register registers an incarnation whose loop neither heartbeats,
// compacts nor ticks unless cfg says so; the test drives it. Closed at cleanup.
func (d *db) register(cfg Config) *Lease {
	d.t.Helper()
	cs := d.cs
	if cfg.Dial == nil {
		cfg.Dial = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, cs) }
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Grace == 0 {
		cfg.Grace = 2 * time.Hour
	}
	if cfg.CompactInterval == 0 {
		cfg.CompactInterval = -1
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = -1
	}
	if cfg.DefaultRetention == 0 {
		cfg.DefaultRetention = time.Millisecond
	}
	cfg.Log = quiet
	l, err := Register(context.Background(), cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// write runs stmts in one write transaction begun with begin (a
// BeginWrite statement) and returns its T. A read of the present follows
// (a pin), as in a database that is read or ticked: it moves the upper
// past the write.
func (d *db) write(begin string, stmts ...string) (uint64, error) {
	ctx := context.Background()
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	var ts int64
	if err := tx.QueryRow(ctx, begin).Scan(&ts); err != nil {
		return 0, err
	}
	// These tests are about holds and compaction of written histories:
	// the tables they create are built at once, not at their first write.
	if _, err := tx.Exec(ctx, storage.EagerHistorySQL); err != nil {
		return 0, err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return 0, fmt.Errorf("%s: %w", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	_, err = d.conn.Exec(ctx, storage.ReadTSSQL)
	return uint64(ts), err
}

func (d *db) mustWrite(begin string, stmts ...string) uint64 {
	d.t.Helper()
	ts, err := d.write(begin, stmts...)
	if err != nil {
		d.t.Fatal(err)
	}
	return ts
}

func (d *db) int(sql string, args ...any) int64 {
	d.t.Helper()
	var v int64
	if err := d.conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// table returns the catalog id and history relation of public.name.
func (d *db) table(name string) (int64, string) {
	d.t.Helper()
	var id int64
	var h string
	if err := d.conn.QueryRow(context.Background(),
		"SELECT id, history FROM mzproxy.catalog WHERE schema_name = 'public' AND name = $1 AND dropped_ts IS NULL", name).Scan(&id, &h); err != nil {
		d.t.Fatal(err)
	}
	return id, h
}

func (d *db) since(id int64) uint64 {
	d.t.Helper()
	return uint64(d.int("SELECT since FROM mzproxy.collections WHERE id = $1", id))
}

// at is the sorted contents of history relation h at ts, as text.
func (d *db) at(h string, ts uint64) string {
	d.t.Helper()
	var s *string
	if err := d.conn.QueryRow(context.Background(),
		"SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM "+h+" WHERE mz_from <= $1 AND mz_to > $1", int64(ts)).Scan(&s); err != nil {
		d.t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}
