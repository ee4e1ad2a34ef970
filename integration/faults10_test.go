package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Faults under session 10's surfaces: sessions that restrict non-system
// views (their pins call pin(), pin_peek() and pin_check(), storage 25 and
// 26) when the backend restarts under their read-only transactions, and
// when their proxy is killed while they pin.

// restrictedURL is url for a session that restricts views from its
// startup options, as pg_dump's SET does.
func restrictedURL(url string) string {
	return url + "&options=-c%20restrict_nonsystem_relation_kind%3Dview"
}

// restrictedTxn runs a read-only transaction on conn: a plain read first
// (its pin rides with it), then a timestamped one, and checks the rows.
func restrictedTxn(ctx context.Context, conn *pgx.Conn, k int) error {
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var v, w string
		var ts int64
		if err := tx.QueryRow(ctx, "SELECT v FROM g WHERE k = $1", k).Scan(&v); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT v, mz_now() FROM g WHERE k = $1", k).Scan(&w, &ts); err != nil {
			return err
		}
		if want := fmt.Sprintf("v%d", k); v != want || w != want {
			return fmt.Errorf("k = %d: %q then %q, want %q", k, v, w, want)
		}
		return nil
	})
}

// TestFault10RestartRestrictedReadOnly: PostgreSQL restarts immediately
// (SIGQUIT) while sessions that restrict views sit inside read-only
// transactions that pinned, and one more has just peeked. Each session's
// next statement fails as its connection is gone (an 08 or 57P SQLSTATE,
// or the socket closed), never with 55000 or XX000; new restricted
// sessions read right, and a counter's acknowledged increments all
// survived.
func TestFault10RestartRestrictedReadOnly(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newDurableCluster(t, ctx)
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, backend: pg.url(), db: "postgres", rows: 10, proxies: [][]string{fastLease}})
	p, url := st.proxies[0], st.url(0, "postgres")
	setup := connectTo(t, ctx, url)
	mustExec(t, ctx, setup, "CREATE TABLE counter (id int PRIMARY KEY, n int)", "INSERT INTO counter VALUES (1, 0)")
	acked := 0
	for range 5 {
		mustExec(t, ctx, setup, "UPDATE counter SET n = n + 1 WHERE id = 1")
		acked++
	}
	var sessions []*pgx.Conn
	for i := range 4 {
		c := connectTo(t, ctx, restrictedURL(url))
		if err := restrictedTxn(ctx, c, 1+i); err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, c, "BEGIN READ ONLY")
		if i%2 == 0 {
			if err := c.QueryRow(ctx, "SELECT v FROM g WHERE k = 1").Scan(new(string)); err != nil {
				t.Fatal(err)
			}
		}
		sessions = append(sessions, c)
	}
	pg.crash(t, ctx)
	for i, c := range sessions {
		_, err := c.Exec(ctx, "SELECT v, mz_now() FROM g WHERE k = 2")
		t.Logf("session %d after the restart: %v", i, err)
		if code := sqlState(err); err == nil || code != "" && !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P") {
			t.Errorf("session %d after the restart: %v, want a lost connection's error", i, err)
		}
	}
	var conn *pgx.Conn
	eventually(t, time.Minute, "a restricted session reads after the restart", func() bool {
		c, err := pgx.Connect(ctx, restrictedURL(url))
		if err == nil {
			if err = restrictedTxn(ctx, c, 3); err == nil {
				conn = c
				return true
			}
			c.Close(ctx)
		}
		return false
	})
	defer conn.Close(ctx)
	for k := 1; k <= 10; k++ {
		if err := restrictedTxn(ctx, conn, k); err != nil {
			t.Errorf("after the restart: %v", err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT n, mz_now() FROM counter WHERE id = 1").Scan(&n, new(int64)); err != nil || n != acked {
		t.Errorf("the counter after the restart: %d, %v; want %d", n, err, acked)
	}
	p.mustAlive(t, ctx)
}

// TestFault10KillMidPin: a proxy is killed with SIGKILL while its sessions,
// which restrict views, run read-only transactions and guarded reads back
// to back (each pins with pin_peek, pin_check or pin()), and a writer
// increments a counter through it. Through the other proxy, restricted
// sessions read right, the counter holds every acknowledged increment
// (at most one more, the one in flight), writes commit, and the killed
// proxy's holds lapse.
func TestFault10KillMidPin(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	// g is made through b, the proxy that lives.
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, db: d.name, rows: 10, proxies: [][]string{fastLease, fastLease}})
	b, a := st.proxies[0], st.proxies[1]
	mustExec(t, ctx, connectTo(t, ctx, b.URL("postgres", d.name)),
		"CREATE TABLE counter (id int PRIMARY KEY, n int)", "INSERT INTO counter VALUES (1, 0)")
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for i := range 5 {
		c := connectTo(t, ctx, restrictedURL(a.URL("postgres", d.name))+"&application_name=killed")
		if err := restrictedTxn(ctx, c, 1); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var err error
				switch i % 3 {
				case 0:
					err = restrictedTxn(ctx, c, 1+i)
				case 1:
					err = c.QueryRow(ctx, "SELECT v, mz_now() FROM g WHERE k = $1", 1+i).Scan(new(string), new(int64))
				default:
					if _, err = c.Exec(ctx, "UPDATE counter SET n = n + 1 WHERE id = 1"); err == nil {
						mu.Lock()
						acked++
						mu.Unlock()
					}
				}
				if err != nil {
					return // the proxy is gone
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	inc := d.incarnation(a)
	a.signal(syscall.SIGKILL)
	wg.Wait()
	d.eventually(30*time.Second, "the killed proxy's sessions' backends ended", func() bool {
		return d.int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'killed'") == 0
	})
	d.eventually(20*time.Second, "the killed proxy's holds lapsed", func() bool {
		return d.int("SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1", inc) == 0
	})
	conn := connectTo(t, ctx, restrictedURL(b.URL("postgres", d.name)))
	for k := 1; k <= 10; k++ {
		if err := restrictedTxn(ctx, conn, k); err != nil {
			t.Errorf("through the other proxy: %v", err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT n, mz_now() FROM counter WHERE id = 1").Scan(&n, new(int64)); err != nil || n < acked || n > acked+1 {
		t.Errorf("the counter after the kill: %d, %v; %d acknowledged", n, err, acked)
	}
	mustExec(t, ctx, conn, "UPDATE counter SET n = n + 1 WHERE id = 1")
	noHoldsOn(t, ctx, d.direct, "g")
	b.mustAlive(t, ctx)
}
