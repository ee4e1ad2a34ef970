package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/internalconn"
)

// ErrOracleClosed is returned by Oracle methods after Close.
var ErrOracleClosed = errors.New("storage: oracle is closed")

// Oracle is the timestamp oracle's client over one dedicated backend
// connection. Its methods are safe for concurrent use.
//
// ReadTS batches: concurrent callers share one backend round trip. A caller
// always joins the next round trip to start, never one already in flight,
// so the timestamp it gets was read after its call began and reflects
// every write that committed before that (linearizability).
//
// One goroutine, started by NewOracle and stopped by Close, owns the
// connection; callers' contexts bound their wait, not the round trip, so a
// caller giving up never cancels a query that others wait for.
type Oracle struct {
	conn   *internalconn.Conn // owned by the loop
	ctx    context.Context    // the loop's; canceled by Close
	cancel context.CancelFunc

	kick chan struct{}    // a read batch is pending (buffered 1)
	reqs chan *oracleCall // WriteTS / ApplyWrite
	done chan struct{}    // closed when the loop has exited

	mu      sync.Mutex
	pending *readBatch // the batch the next round trip will serve

	roundTrips atomic.Int64
	closeOnce  sync.Once
}

type readBatch struct {
	done chan struct{} // closed when ts/err are set
	ts   uint64
	err  error
}

type oracleCall struct {
	sql   string
	args  []any
	scan  bool               // the statement returns one bigint
	retry internalconn.Retry // whether it may run again when its connection died
	reply chan oracleReply   // buffered 1: the loop never blocks on it
}

type oracleReply struct {
	ts  uint64
	err error
}

// NewOracle returns an Oracle that owns conn (Close closes it). conn must
// be used by nothing else and must see the installed schema.
func NewOracle(conn *pgx.Conn) *Oracle {
	return newOracle(internalconn.New(conn, nil))
}

func newOracle(conn *internalconn.Conn) *Oracle {
	ctx, cancel := context.WithCancel(context.Background())
	o := &Oracle{
		conn:   conn,
		ctx:    ctx,
		cancel: cancel,
		kick:   make(chan struct{}, 1),
		reqs:   make(chan *oracleCall),
		done:   make(chan struct{}),
	}
	go o.loop()
	return o
}

// NewOracleDial is NewOracle over a connection made by dial, which is
// called again (before the next round trip) whenever the connection has
// been lost, so a backend restart costs the calls in flight, not the Oracle.
func NewOracleDial(ctx context.Context, dial func(context.Context) (*pgx.Conn, error)) (*Oracle, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("storage: oracle: %w", err)
	}
	return newOracle(internalconn.New(conn, dial)), nil
}

// RoundTrips is the number of backend round trips made so far (for tests
// and metrics).
func (o *Oracle) RoundTrips() int64 { return o.roundTrips.Load() }

// ReadTS returns the oracle's read timestamp.
func (o *Oracle) ReadTS(ctx context.Context) (uint64, error) {
	o.mu.Lock()
	b := o.pending
	if b == nil {
		b = &readBatch{done: make(chan struct{})}
		o.pending = b
	}
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default: // a kick is already queued; it will take this batch
	}
	select {
	case <-b.done:
		return b.ts, b.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-o.done:
		return 0, ErrOracleClosed
	}
}

// WriteTS allocates a write timestamp, never below the upper.
func (o *Oracle) WriteTS(ctx context.Context) (uint64, error) {
	// Each run allocates a timestamp: run once.
	return o.call(ctx, &oracleCall{sql: WriteTSSQL, scan: true, retry: internalconn.Once})
}

// ApplyWrite raises read_ts and write_ts to at least t. Commits through
// begin_write need not call it: they apply their timestamp in the commit
// transaction itself.
func (o *Oracle) ApplyWrite(ctx context.Context, t uint64) error {
	// Raising to at least t twice raises to t.
	_, err := o.call(ctx, &oracleCall{sql: ApplyWriteSQL, args: []any{ts(t)}, retry: internalconn.Idempotent})
	return err
}

func (o *Oracle) call(ctx context.Context, c *oracleCall) (uint64, error) {
	c.reply = make(chan oracleReply, 1)
	select {
	case o.reqs <- c:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-o.done:
		return 0, ErrOracleClosed
	}
	select {
	case r := <-c.reply:
		return r.ts, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-o.done:
		return 0, ErrOracleClosed
	}
}

// Close stops the loop, failing waiting callers with ErrOracleClosed, and
// closes the connection.
func (o *Oracle) Close() error {
	o.closeOnce.Do(func() {
		o.cancel()
		<-o.done
		o.conn.Close()
	})
	return nil
}

func (o *Oracle) loop() {
	defer close(o.done)
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-o.kick:
			o.mu.Lock()
			b := o.pending
			o.pending = nil
			o.mu.Unlock()
			if b == nil {
				continue
			}
			b.ts, b.err = o.run(&oracleCall{sql: ReadTSSQL, scan: true, retry: internalconn.Idempotent})
			close(b.done)
		case c := <-o.reqs:
			var r oracleReply
			r.ts, r.err = o.run(c)
			c.reply <- r
		}
	}
}

// run makes c's round trip on a live connection (redialed when the last
// one died: a backend restart costs no call that may run again).
func (o *Oracle) run(c *oracleCall) (uint64, error) {
	var t int64
	err := o.conn.Run(o.ctx, c.retry, func(conn *pgx.Conn) error {
		o.roundTrips.Add(1)
		if c.scan {
			return conn.QueryRow(o.ctx, c.sql, c.args...).Scan(&t)
		}
		_, err := conn.Exec(o.ctx, c.sql, c.args...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("storage: oracle: %w", err)
	}
	return uint64(t), nil
}
