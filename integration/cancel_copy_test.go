package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestCancelCopyInWaitingForData: a CancelRequest while COPY FROM STDIN
// waits for the client's data cancels the COPY as PostgreSQL does: the
// COPY fails with 57014 once the client sends more (here CopyDone), the
// rows sent are not written, and the session goes on. Each check runs against
// PostgreSQL itself and through mzproxy (a collection: the COPY is a
// write in the proxy's own transaction).
func TestCancelCopyInWaitingForData(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	ctx := testContext(t)
	table := tableName(t)
	setup := p.connect(t, ctx)
	setup.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id int, v text)", table))
	// A write of no row builds the table's history (storage version 38):
	// before it, a COPY directly is refused at its start (the refusing
	// trigger fires before the statement), not after its data.
	setup.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT 1, 'x' WHERE false", table))
	// rowsAtBackend: the rows the backend has read when the client has
	// sent its first and waits: mzproxy keeps a COPY's data until the
	// client's CopyDone (or until its buffer fills), so its backend waits
	// for the first.
	targets := []struct {
		name, url     string
		rowsAtBackend int
	}{
		{"postgres", directURL("postgres", "postgres"), 1},
		{"mzproxy", p.URL("postgres", "postgres"), 0},
	}
	for _, target := range targets {
		t.Run("wire/"+target.name, func(t *testing.T) {
			copyCanceledOnTheWire(t, testContext(t), target.url, table, target.rowsAtBackend)
		})
		t.Run("pgconn/"+target.name, func(t *testing.T) {
			copyCanceledWithPgconn(t, testContext(t), target.url, table, target.rowsAtBackend)
		})
	}
}

// copyCanceledOnTheWire checks the messages: after the cancel, nothing
// while the client sends nothing; its CopyDone is answered with 57014 and
// ReadyForQuery.
func copyCanceledOnTheWire(t *testing.T, ctx context.Context, connURL, table string, rowsAtBackend int) {
	app := table + "_wire"
	pc, err := pgconn.Connect(ctx, withApp(connURL, app))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Conn.Close()
	_ = hc.Conn.SetDeadline(time.Now().Add(20 * time.Second))
	fe := hc.Frontend
	send := func(msgs ...pgproto3.FrontendMessage) {
		for _, m := range msgs {
			fe.Send(m)
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	receive := func() pgproto3.BackendMessage {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		return m
	}
	send(&pgproto3.Query{String: fmt.Sprintf("COPY %s FROM STDIN", table)})
	if m, ok := receive().(*pgproto3.CopyInResponse); !ok {
		t.Fatalf("COPY answered %T, want CopyInResponse", m)
	}
	send(&pgproto3.CopyData{Data: []byte("1\tone\n")})
	waitCopyWantsData(t, ctx, connectDirect(t, ctx), app, rowsAtBackend)
	addr := hc.Conn.RemoteAddr()
	rawCancel(t, addr.Network(), addr.String(), hc.PID, hc.SecretKey)

	// PostgreSQL does not interrupt its wait for COPY data: nothing comes
	// until the client sends more.
	_ = hc.Conn.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	if n, err := hc.Conn.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while the client sends nothing after the cancel: read %d bytes, %v; want a timeout", n, err)
	}
	_ = hc.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	send(&pgproto3.CopyDone{})
	var got []string
	for {
		m := receive()
		got = append(got, fmt.Sprintf("%T", m))
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			if er.Code != "57014" || er.Message != "canceling statement due to user request" {
				t.Errorf("error %s %q, want 57014 canceling statement due to user request", er.Code, er.Message)
			}
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if want := "[*pgproto3.ErrorResponse *pgproto3.ReadyForQuery]"; fmt.Sprint(got) != want {
		t.Errorf("CopyDone after the cancel answered %v, want %s", got, want)
	}
	send(&pgproto3.Query{String: fmt.Sprintf("SELECT count(*) FROM %s", table)})
	var rows string
	for done := false; !done; {
		switch m := receive().(type) {
		case *pgproto3.DataRow:
			rows = string(m.Values[0])
		case *pgproto3.ErrorResponse:
			t.Fatalf("SELECT after the canceled COPY: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			done = true
		}
	}
	if rows != "0" {
		t.Errorf("rows after the canceled COPY: %s, want 0", rows)
	}
}

// copyCanceledWithPgconn: pgconn's CopyFrom with a reader that blocks after
// one row, canceled with the connection's own CancelRequest, fails with
// 57014 and the connection goes on.
func copyCanceledWithPgconn(t *testing.T, ctx context.Context, connURL, table string, rowsAtBackend int) {
	app := table + "_pgconn"
	conn := connectURL(t, ctx, withApp(connURL, app))
	r := &blockingReader{waiting: make(chan struct{}), release: make(chan struct{})}
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		_, err := conn.PgConn().CopyFrom(ctx, r, fmt.Sprintf("COPY %s FROM STDIN", table))
		done <- err
	}()
	var release sync.Once
	releaseReader := func() { release.Do(func() { close(r.release) }) }
	// A check that fails before the release leaves CopyFrom waiting: it
	// ends before the connection is closed (pgconn's Close during a
	// CopyFrom panicked).
	t.Cleanup(func() {
		releaseReader()
		select {
		case <-finished:
		case <-time.After(20 * time.Second):
		}
	})
	<-r.waiting
	waitCopyWantsData(t, ctx, connectDirect(t, ctx), app, rowsAtBackend)
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	// The reader ends: pgconn sends CopyDone, which without the cancel
	// would end the COPY with success.
	releaseReader()
	select {
	case err := <-done:
		wantCode(t, err, "57014")
	case <-ctx.Done():
		t.Fatal("CopyFrom did not return")
	}
	var n int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s", table)).Scan(&n); err != nil {
		t.Fatalf("the session after the canceled COPY: %v", err)
	}
	if n != 0 {
		t.Errorf("rows after the canceled COPY: %d, want 0", n)
	}
}

// blockingReader gives one row, then blocks until release and ends.
type blockingReader struct {
	sent             bool
	waiting, release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		return copy(p, "1\tone\n"), nil
	}
	close(r.waiting)
	<-r.release
	return 0, io.EOF
}

// waitCopyWantsData waits until the COPY FROM STDIN of the backend named
// app has taken rows rows and waits for more data (its wait event
// ClientRead). Only then does PostgreSQL leave a cancel pending until the
// client sends more: a cancel that comes while the backend still reads or
// inserts a row fails the COPY at once (its CHECK_FOR_INTERRUPTS per
// row), and so does one that comes while mzproxy's own statements in
// front of the COPY run; either answers 57014 before the client has sent
// anything more. Under load the first happened (session 24: "while the
// client sends nothing after the cancel: read 1 bytes" against PostgreSQL
// itself, once in 20 runs) when the test waited only for the backend to
// be active, which it is from the COPY's start (and through mzproxy from
// its BEGIN and history build on).
func waitCopyWantsData(t testing.TB, ctx context.Context, direct *pgx.Conn, app string, rows int) {
	t.Helper()
	waitOneRow(t, ctx, direct, fmt.Sprintf("%s's COPY waiting for data after %d rows", app, rows),
		`SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_progress_copy c USING (pid)
			WHERE a.application_name = $1 AND a.state = 'active' AND a.wait_event = 'ClientRead' AND c.tuples_processed = $2`,
		app, rows)
}

// withApp sets application_name in a connection URL.
func withApp(connURL, app string) string {
	u, err := url.Parse(connURL)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}
