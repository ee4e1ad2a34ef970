package slt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Protocol selects how statements and queries reach the server.
type Protocol string

// The protocols. Simple sends one Query message per record (what pgx does
// in QueryExecModeSimpleProtocol); Extended sends Parse, Bind, Describe
// portal, Execute, Sync in one round trip with the unnamed statement (what
// pgx does in QueryExecModeExec). Neither adds a round trip per record.
const (
	Extended Protocol = "extended"
	Simple   Protocol = "simple"
)

// Options configure a run.
type Options struct {
	// URL is a libpq connection string or postgres:// URL. Its database is
	// where fresh databases are created from, or where records run when
	// FreshDB is false.
	URL string
	// Protocol defaults to Extended. simple records always use the simple
	// protocol.
	Protocol Protocol
	// FreshDB runs each file in a database of its own, created with a
	// unique name before the file and dropped after it.
	FreshDB bool
	// Engine is the name skipif/onlyif compare with; default "postgresql".
	Engine string
	// Verbose, when set, receives every failure with file:line, the SQL,
	// expected and actual output.
	Verbose io.Writer
	// Rewrite writes actual results back into the files in place of the
	// expected output of query and simple records that failed on their
	// output.
	Rewrite bool
	// Timeout bounds each record; 0 means none.
	Timeout time.Duration
	// Timings, when set, receives one tab-separated line per record run
	// (not skipped), per connection a record opened and per wait for a
	// file's database (made in advance while the previous file ran,
	// except for the first file's): the file, the record's line (0 for
	// the others), what it was (the SQL's first two words in upper case,
	// "connect" or "database") and the wall time in microseconds. The
	// writer is used from Run's goroutine only.
	Timings io.Writer
}

// Run runs the files in order, one at a time, and reports every record.
// The error is for unusable options only; a file that cannot run is
// reported in its FileReport.Err.
func Run(ctx context.Context, opts Options, files ...string) (*Report, error) {
	if opts.URL == "" {
		return nil, errors.New("slt: no URL")
	}
	switch opts.Protocol {
	case "":
		opts.Protocol = Extended
	case Extended, Simple:
	default:
		return nil, fmt.Errorf("slt: unknown protocol %q (want simple or extended)", opts.Protocol)
	}
	if opts.Engine == "" {
		opts.Engine = "postgresql"
	}
	cfg, err := pgconn.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("slt: %w", err)
	}
	r := &runner{opts: opts, cfg: cfg}
	defer r.closeAdmin()
	// Creating and dropping a database takes a while; the database for
	// the next file is made while the current one runs, and finished
	// databases are dropped in the background. All of it is done before
	// Run returns.
	defer r.bg.Wait()
	rep := &Report{}
	var next chan dbResult
	defer func() {
		if next != nil {
			r.bg.Go(func() {
				if res := <-next; res.err == nil {
					r.dropDB(res.name)
				}
			})
		}
	}()
	for i, f := range files {
		pre := next
		next = nil
		prefetch := func() {}
		if opts.FreshDB && i+1 < len(files) {
			prefetch = func() { next = r.prefetchDB(ctx) }
		}
		fr := r.runFile(ctx, f, pre, prefetch)
		rep.Files = append(rep.Files, fr)
		rep.Passed += fr.Passed
		rep.Failed += fr.Failed
		rep.Skipped += fr.Skipped
		if ctx.Err() != nil {
			break
		}
	}
	return rep, nil
}

type runner struct {
	opts Options
	cfg  *pgconn.Config
	bg   sync.WaitGroup // background CREATE/DROP DATABASE

	adminMu sync.Mutex
	admin   *pgconn.PgConn // on the URL's database, for CREATE/DROP DATABASE
}

type dbResult struct {
	name string
	err  error
}

// prefetchDB starts making a database in the background.
func (r *runner) prefetchDB(ctx context.Context) chan dbResult {
	ch := make(chan dbResult, 1)
	r.bg.Go(func() {
		name, err := r.createDB(ctx)
		ch <- dbResult{name, err}
	})
	return ch
}

var dbSeq atomic.Int64

// adminConn is called with adminMu held.
func (r *runner) adminConn(ctx context.Context) (*pgconn.PgConn, error) {
	if r.admin != nil && !r.admin.IsClosed() {
		return r.admin, nil
	}
	c, err := pgconn.ConnectConfig(ctx, r.cfg.Copy())
	if err != nil {
		return nil, err
	}
	r.admin = c
	return c, nil
}

func (r *runner) closeAdmin() {
	if r.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.admin.Close(ctx)
		r.admin = nil
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// createDB makes a database with a name no other run uses.
func (r *runner) createDB(ctx context.Context) (string, error) {
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	c, err := r.adminConn(ctx)
	if err != nil {
		return "", err
	}
	for {
		name := fmt.Sprintf("mzslt_%d_%s_%d", os.Getpid(),
			strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36), dbSeq.Add(1))
		_, err := c.Exec(ctx, "CREATE DATABASE "+quoteIdent(name)).ReadAll()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P04" { // duplicate_database
			continue
		}
		return name, err
	}
}

// dropDB drops a database the runner created. Its sessions were closed
// just before, but a backend may not have exited yet, so WITH (FORCE) ends
// stragglers; when the server refuses that (an older PostgreSQL, or a
// proxy that does not take the option) plain DROP is retried while the
// database is still in use.
func (r *runner) dropDB(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	c, err := r.adminConn(ctx)
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)").ReadAll()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err // nil, or no answer from the server
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)).ReadAll()
		if !errors.As(err, &pe) || pe.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fileState is what one file's records share.
type fileState struct {
	r       *runner
	path    string
	db      string // database in use; "" is the URL's
	created []string
	conns   map[string]*pgconn.PgConn
	users   map[string]string

	// connecting is the time spent opening connections so far.
	connecting time.Duration

	threshold int
	cockroach bool
	labels    map[string]string

	rep   *FileReport
	edits []edit
}

// runFile runs one file. pre, when not nil, delivers the file's fresh
// database; prefetch is called once the file has its database.
func (r *runner) runFile(ctx context.Context, path string, pre chan dbResult, prefetch func()) *FileReport {
	fr := &FileReport{File: path}
	fs := &fileState{
		r: r, path: path, rep: fr,
		conns:     map[string]*pgconn.PgConn{},
		users:     map[string]string{},
		threshold: 8,
		labels:    map[string]string{},
	}
	defer fs.close()
	// The database first, so that a prefetched one is always dropped.
	var err error
	start := time.Now()
	if pre != nil {
		res := <-pre
		fs.db, err = res.name, res.err
	} else if r.opts.FreshDB {
		fs.db, err = r.createDB(ctx)
	}
	fs.timing(0, "database", time.Since(start))
	prefetch()
	if err != nil {
		fr.Err = fmt.Errorf("create database: %w", err)
		return fr
	}
	if fs.db != "" {
		fs.created = append(fs.created, fs.db)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		fr.Err = err
		return fr
	}
	recs, perr := Parse(src)

	halted := false
	for i := range recs {
		if ctx.Err() != nil {
			fr.Err = ctx.Err()
			return fr
		}
		rec := &recs[i]
		if rec.skipped(r.opts.Engine) {
			fs.result(rec, Skipped, "")
			fs.noteSkippedLabel(rec)
			continue
		}
		if fs.runRecord(ctx, rec) {
			halted = true
			break
		}
		if fr.Err != nil {
			return fr
		}
	}
	if perr != nil && !halted {
		// The original runner stops at a record it cannot read, as an error.
		line, msg := 0, perr.Error()
		var pe *ParseError
		if errors.As(perr, &pe) {
			line, msg = pe.Line, pe.Msg
		}
		fr.Results = append(fr.Results, Result{File: path, Line: line, Kind: KindParse, Outcome: Failed, Message: msg})
		fr.add(Failed)
		if w := r.opts.Verbose; w != nil {
			fmt.Fprintf(w, "%s:%d: %s\n", path, line, msg)
		}
	}
	if r.opts.Rewrite && len(fs.edits) > 0 {
		if err := rewriteFile(path, src, fs.edits); err != nil {
			fr.Err = fmt.Errorf("rewrite: %w", err)
		}
	}
	return fr
}

func kindOf(d Directive) Kind {
	switch d {
	case DirStatement:
		return KindStatement
	case DirQuery:
		return KindQuery
	case DirSimple:
		return KindSimple
	}
	return KindControl
}

func (fs *fileState) result(rec *Record, o Outcome, msg string) {
	fs.rep.Results = append(fs.rep.Results, Result{
		File: fs.path, Line: rec.Line, Kind: kindOf(rec.Directive), Outcome: o, Message: msg,
	})
	fs.rep.add(o)
}

// fail records a failure and, when verbose, prints it with the SQL and both
// outputs.
func (fs *fileState) fail(rec *Record, msg string, expected, actual []string) {
	fs.result(rec, Failed, msg)
	w := fs.r.opts.Verbose
	if w == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: %s\n", fs.path, rec.Line, msg)
	fmt.Fprintf(&b, "    sql:\n%s", indent(strings.Split(rec.SQL, "\n")))
	if expected != nil || actual != nil {
		fmt.Fprintf(&b, "    expected:\n%s    actual:\n%s", indent(expected), indent(actual))
	}
	io.WriteString(w, b.String())
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("        ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func (fs *fileState) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	fs.closeConns(ctx)
	created, rep := fs.created, fs.rep
	fs.r.bg.Go(func() {
		for _, db := range created {
			if err := fs.r.dropDB(db); err != nil && rep.Err == nil {
				rep.Err = fmt.Errorf("drop database %s: %w", db, err)
			}
		}
	})
}

func (fs *fileState) closeConns(ctx context.Context) {
	for name, c := range fs.conns {
		c.Close(ctx)
		delete(fs.conns, name)
	}
}

// conn returns the named connection (the main one is ""), opening it on
// first use or after it broke.
func (fs *fileState) conn(ctx context.Context, name, user string) (*pgconn.PgConn, error) {
	if user != "" {
		fs.users[name] = user
	}
	if c := fs.conns[name]; c != nil && !c.IsClosed() {
		return c, nil
	}
	cfg := fs.r.cfg.Copy()
	if fs.db != "" {
		cfg.Database = fs.db
	}
	if u := fs.users[name]; u != "" {
		cfg.User = u
	}
	start := time.Now()
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d := time.Since(start)
	fs.connecting += d
	fs.timing(0, "connect", d)
	fs.conns[name] = c
	return c, nil
}

// timing writes one line to Options.Timings, if set: what took d, at
// line (0: not a record's).
func (fs *fileState) timing(line int, what string, d time.Duration) {
	if w := fs.r.opts.Timings; w != nil {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", fs.path, line, what, d.Microseconds())
	}
}

// leadingWords is the first n words of sql in upper case, for a timing.
func leadingWords(sql string, n int) string {
	f := strings.Fields(sql)
	if len(f) > n {
		f = f[:n]
	}
	for i, w := range f {
		if j := strings.IndexAny(w, "(;,"); j >= 0 {
			w = w[:j]
		}
		f[i] = strings.ToUpper(w)
	}
	return strings.Join(f, " ")
}

// runRecord runs one record that is not skipped and reports whether it was
// halt.
func (fs *fileState) runRecord(ctx context.Context, rec *Record) bool {
	if t := fs.r.opts.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	switch rec.Directive {
	case DirHalt:
		return true
	case DirHashThreshold:
		fs.threshold, _ = strconv.Atoi(rec.Arg)
	case DirMode:
		fs.cockroach = rec.Arg == "cockroach"
	case DirResetServer:
		fs.resetServer(ctx)
	case DirStatement, DirQuery, DirSimple:
		start, connecting := time.Now(), fs.connecting
		switch rec.Directive {
		case DirStatement:
			fs.statement(ctx, rec)
		case DirQuery:
			fs.query(ctx, rec)
		default:
			fs.simple(ctx, rec)
		}
		// A connection the record opened has its own line.
		fs.timing(rec.Line, leadingWords(rec.SQL, 2), time.Since(start)-(fs.connecting-connecting))
	}
	return false
}

// resetServer moves the rest of the file to a new, empty database (even
// with FreshDB off: there is no other way to empty a server one does not
// own), closing every connection.
func (fs *fileState) resetServer(ctx context.Context) {
	fs.closeConns(ctx)
	db, err := fs.r.createDB(ctx)
	if err != nil {
		fs.rep.Err = fmt.Errorf("reset-server: %w", err)
		return
	}
	fs.db = db
	fs.created = append(fs.created, db)
}

type resultSet struct {
	fields []pgconn.FieldDescription
	rows   [][]cell
	tag    pgconn.CommandTag
}

func appendRow(rows [][]cell, vals [][]byte) [][]cell {
	row := make([]cell, len(vals))
	for i, v := range vals {
		if v == nil {
			row[i].null = true
		} else {
			row[i].s = string(v)
		}
	}
	return append(rows, row)
}

// execute runs sql and collects every result set, in text format. The
// results before an error are returned along with it.
func execute(ctx context.Context, c *pgconn.PgConn, sql string, simple bool) ([]resultSet, error) {
	if !simple {
		rr := c.ExecParams(ctx, sql, nil, nil, nil, nil)
		// Field descriptions arrive before the rows, and also when there
		// are none.
		rs := resultSet{fields: slices.Clone(rr.FieldDescriptions())}
		for rr.NextRow() {
			rs.rows = appendRow(rs.rows, rr.Values())
		}
		var err error
		rs.tag, err = rr.Close()
		if err != nil {
			return nil, err
		}
		return []resultSet{rs}, nil
	}
	mrr := c.Exec(ctx, sql)
	var out []resultSet
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		rs := resultSet{fields: slices.Clone(rr.FieldDescriptions())}
		for rr.NextRow() {
			rs.rows = appendRow(rs.rows, rr.Values())
		}
		var err error
		if rs.tag, err = rr.Close(); err != nil {
			break
		}
		out = append(out, rs)
	}
	return out, mrr.Close()
}

// errorText is the text an expected-error regex is tried against: the
// server's message, and failing that the form Materialize's runner shows
// (tokio-postgres' "db error: ERROR: message").
func errorTexts(pe *pgconn.PgError) []string {
	return []string{pe.Message, "db error: " + pe.Severity + ": " + pe.Message}
}

// checkError decides an expected error. Only an error the server reported
// counts: a broken connection is not the error a test expects.
func (fs *fileState) checkError(rec *Record, err error) {
	if err == nil {
		fs.fail(rec, "expected an error, but it succeeded", nil, nil)
		return
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		fs.fail(rec, "expected a server error, got: "+err.Error(), nil, nil)
		return
	}
	if rec.PGCode != "" && pe.Code != rec.PGCode {
		fs.fail(rec, fmt.Sprintf("expected SQLSTATE %s, got %s: %s", rec.PGCode, pe.Code, pe.Message), nil, nil)
		return
	}
	if rec.ErrorRegex == "" {
		fs.result(rec, Passed, "")
		return
	}
	re, rerr := regexp.Compile(rec.ErrorRegex)
	if rerr != nil {
		re = regexp.MustCompile(regexp.QuoteMeta(rec.ErrorRegex))
	}
	for _, t := range errorTexts(pe) {
		if re.MatchString(t) {
			fs.result(rec, Passed, "")
			return
		}
	}
	fs.fail(rec, fmt.Sprintf("error %q does not match %q", pe.Message, rec.ErrorRegex), nil, nil)
}

func describeErr(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Severity + ": " + pe.Message + " (SQLSTATE " + pe.Code + ")"
	}
	return err.Error()
}

func (fs *fileState) statement(ctx context.Context, rec *Record) {
	c, err := fs.conn(ctx, "", "")
	if err != nil {
		fs.fail(rec, "connect: "+err.Error(), nil, nil)
		return
	}
	res, err := execute(ctx, c, rec.SQL, fs.r.opts.Protocol == Simple)
	if rec.ExpectError {
		fs.checkError(rec, err)
		return
	}
	if err != nil {
		fs.fail(rec, "statement failed: "+describeErr(err), nil, nil)
		return
	}
	if rec.Count >= 0 {
		var n int64
		if len(res) > 0 {
			n = res[len(res)-1].tag.RowsAffected()
		}
		if n != rec.Count {
			fs.fail(rec, fmt.Sprintf("expected %d rows affected, got %d", rec.Count, n), nil, nil)
			return
		}
	}
	fs.result(rec, Passed, "")
}

func (fs *fileState) query(ctx context.Context, rec *Record) {
	c, err := fs.conn(ctx, "", "")
	if err != nil {
		fs.fail(rec, "connect: "+err.Error(), nil, nil)
		return
	}
	res, err := execute(ctx, c, rec.SQL, fs.r.opts.Protocol == Simple)
	if rec.ExpectError {
		fs.checkError(rec, err)
		return
	}
	if err != nil {
		fs.fail(rec, "query failed: "+describeErr(err), nil, nil)
		return
	}
	// A query's result is its first result set with columns (the last
	// result set when none has).
	var rs resultSet
	for i, r := range res {
		if r.fields != nil || i == len(res)-1 {
			rs = r
			break
		}
	}
	msg, expected, actual := fs.checkQuery(rec, &rs)
	if msg == "" {
		fs.result(rec, Passed, "")
		return
	}
	fs.fail(rec, msg, expected, actual)
	if actual != nil {
		fs.edits = append(fs.edits, edit{rec: rec, lines: actual})
	}
}

// checkQuery compares a query's result with its expected output. It
// returns an empty message when they agree; otherwise the message, the
// expected lines and the actual lines in the file's format (nil when the
// result cannot be shown that way).
func (fs *fileState) checkQuery(rec *Record, rs *resultSet) (string, []string, []string) {
	ncol := len(rec.Types)
	if len(rs.fields) != ncol {
		return fmt.Sprintf("wrong number of result columns: expected %d but got %d", ncol, len(rs.fields)), nil, nil
	}
	if rec.Multiline {
		var lines []string
		for _, row := range rs.rows {
			vals := make([]string, len(row))
			for i, v := range row {
				vals[i] = v.s
				if v.null {
					vals[i] = "NULL"
				}
			}
			lines = append(lines, strings.Split(strings.Join(vals, " "), "\n")...)
		}
		if slices.Equal(lines, rec.Expected) {
			return "", nil, nil
		}
		return "wrong result", rec.Expected, lines
	}

	vals := make([]string, 0, len(rs.rows)*ncol)
	for _, row := range rs.rows {
		for j, v := range row {
			vals = append(vals, render(rec.Types[j], rs.fields[j].DataTypeOID, v))
		}
	}
	sortValues(vals, ncol, rec.Sort)

	// What this result looks like in the file: names, then a hash or the
	// values.
	var actual []string
	if rec.ColNames {
		names := make([]string, len(rs.fields))
		for i, f := range rs.fields {
			names[i] = strings.ReplaceAll(f.Name, " ", "␠")
		}
		actual = append(actual, strings.Join(names, " "))
	}
	// The md5 is needed for a label, a hashed result or a hash line
	// expected; compute it at most once.
	var sum string
	md5sum := func() string {
		if sum == "" {
			sum = hashValues(vals)
		}
		return sum
	}
	hashed := fs.threshold > 0 && len(vals) > fs.threshold
	switch {
	case hashed:
		actual = append(actual, hashLine(len(vals), md5sum()))
	case fs.cockroach:
		for i := 0; i+ncol <= len(vals); i += ncol {
			actual = append(actual, cockroachJoin(vals[i:i+ncol]))
		}
	default:
		actual = append(actual, vals...)
	}

	var msgs []string
	exp := rec.Expected
	if rec.ColNames {
		var want []string
		if len(exp) > 0 {
			for _, n := range strings.Split(exp[0], " ") {
				if n != "" {
					want = append(want, strings.ReplaceAll(n, "␠", " "))
				}
			}
			exp = exp[1:]
		}
		got := make([]string, len(rs.fields))
		for i, f := range rs.fields {
			got[i] = f.Name
		}
		if !slices.Equal(want, got) {
			msgs = append(msgs, fmt.Sprintf("wrong column names: expected %q, got %q", want, got))
		}
	}
	if rec.Label != "" {
		key := labelKey(rec.Label)
		h := md5sum()
		if prev, ok := fs.labels[key]; ok && prev != h {
			msgs = append(msgs, fmt.Sprintf("labeled result [%s] does not agree with previous values", rec.Label))
		} else if !ok {
			fs.labels[key] = h
		}
	}
	if len(exp) == 1 && parseHashLine(exp[0]) {
		if got := hashLine(len(vals), md5sum()); exp[0] != got {
			msgs = append(msgs, "wrong result hash")
		}
	} else {
		want := exp
		if fs.cockroach {
			want = cockroachExpected(exp, ncol, rec.Sort)
		}
		switch {
		case len(want) != len(vals):
			msgs = append(msgs, fmt.Sprintf("wrong result: expected %d values, got %d", len(want), len(vals)))
		case !slices.Equal(want, vals):
			for i := range want {
				if want[i] != vals[i] {
					msgs = append(msgs, fmt.Sprintf("wrong result: value %d (row %d): expected %q, got %q",
						i+1, i/ncol+1, want[i], vals[i]))
					break
				}
			}
		}
	}
	if len(msgs) == 0 {
		return "", nil, nil
	}
	return strings.Join(msgs, "; "), rec.Expected, actual
}

// labelKey is the part of a label the original keeps: 20 bytes.
func labelKey(label string) string {
	if len(label) > 20 {
		return label[:20]
	}
	return label
}

// noteSkippedLabel does what the original does with a skipped query that
// has a label: the hash of its expected output becomes the label's value
// if the label has none yet, so later queries must agree with it.
func (fs *fileState) noteSkippedLabel(rec *Record) {
	if rec.Directive != DirQuery || rec.Label == "" || rec.ExpectError || len(rec.Expected) == 0 {
		return
	}
	key := labelKey(rec.Label)
	if _, ok := fs.labels[key]; ok {
		return
	}
	if exp := rec.Expected; len(exp) == 1 && parseHashLine(exp[0]) {
		fs.labels[key] = strings.Fields(exp[0])[4]
	} else {
		fs.labels[key] = hashValues(exp)
	}
}

// cockroachExpected turns expected lines of cockroach mode into values, in
// the order the actual values are compared in: cockroach files list rows
// unsorted, so the expectation is sorted like the result.
func cockroachExpected(lines []string, ncol int, mode Sort) []string {
	var vals []string
	for _, l := range lines {
		vals = append(vals, cockroachSplit(l, ncol)...)
	}
	sortValues(vals, ncol, mode)
	return vals
}

// simple runs a record over the simple-query protocol on a named
// connection and compares Materialize's rendering: each row's values
// joined by commas, then "COMPLETE n" per statement; an error shows as
// tokio-postgres prints it.
func (fs *fileState) simple(ctx context.Context, rec *Record) {
	c, err := fs.conn(ctx, rec.Conn, rec.User)
	if err != nil {
		fs.fail(rec, "connect: "+err.Error(), nil, nil)
		return
	}
	res, err := execute(ctx, c, rec.SQL, true)
	// rows are the data lines, tail the COMPLETE and error lines; all is
	// both in the order they came.
	var rows, tail, all []string
	for _, rs := range res {
		for _, row := range rs.rows {
			vals := make([]string, len(row))
			for i, v := range row {
				vals[i] = v.s
				if v.null {
					vals[i] = "NULL"
				}
			}
			l := strings.Join(vals, ",")
			rows = append(rows, l)
			all = append(all, l)
		}
		l := "COMPLETE " + strconv.FormatInt(rs.tag.RowsAffected(), 10)
		tail = append(tail, l)
		all = append(all, l)
	}
	if err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			fs.fail(rec, "simple failed: "+err.Error(), nil, nil)
			return
		}
		ls := []string{"db error: " + pe.Severity + ": " + pe.Message}
		if pe.Detail != "" {
			ls = append(ls, "DETAIL: "+pe.Detail)
		}
		if pe.Hint != "" {
			ls = append(ls, "HINT: "+pe.Hint)
		}
		tail = append(tail, ls...)
		all = append(all, ls...)
	}
	var ok bool
	var expected, actual []string
	if rec.Multiline {
		// The text up to EOF is the rows; the COMPLETE lines follow EOF.
		var lines []string
		for _, r := range rows {
			lines = append(lines, strings.Split(r, "\n")...)
		}
		ok = slices.Equal(lines, rec.Expected) && slices.Equal(tail, rec.After)
		expected = append(append(slices.Clone(rec.Expected), "EOF"), rec.After...)
		actual = append(append(lines, "EOF"), tail...)
	} else {
		// A value may hold newlines; the expectation is line by line.
		for _, l := range all {
			actual = append(actual, strings.Split(l, "\n")...)
		}
		expected = rec.Expected
		ok = slices.Equal(actual, expected)
	}
	if ok {
		fs.result(rec, Passed, "")
		return
	}
	fs.fail(rec, "wrong simple output", expected, actual)
	fs.edits = append(fs.edits, edit{rec: rec, lines: actual})
}
