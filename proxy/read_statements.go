package proxy

import (
	"slices"
	"strconv"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/planner"
)

// A guarded simple-Query read (seen_read.go) whose plan came from a cached
// skeleton differs from the session's last one only in its literals: sent
// as spliced text, the backend parses and plans it at every call, most of
// its cost (issue 15). When the plan has a Bound (planner/bound.go: its
// literals that are provably the same as parameters of their own type),
// the read is sent instead as the Bind, Describe, Execute and Sync of a
// statement prepared once on the backend connection, per text (the
// Bound's, with the timestamp's holes rendered), catalog revision and
// search_path, as the read guard is keyed. The client sees what a simple
// Query answers: RowDescription (the portal's Describe: text format, as a
// Query's), DataRows, CommandComplete or ErrorResponse, ReadyForQuery; the
// ParseComplete and BindComplete are the proxy's own.
//
// A text is prepared at its second use, not its first: a literal that
// stays in the text (in the select list, a LIMIT) makes a new text at each
// value, which would only evict the texts that do repeat. Statements are
// kept in an LRU per connection; an evicted one is closed
// in the pipeline of the read that evicted it. A client's DISCARD ALL, DEALLOCATE ALL or DEALLOCATE
// (which may name one, read from pg_prepared_statements) makes the proxy
// forget them all: each is closed, and prepared again at its next use.

// readStatementsPerConn bounds the reads prepared on one backend
// connection.
const readStatementsPerConn = 64

// readStatements are the reads prepared on a backend connection.
type readStatements struct {
	byKey *lru.Cache[readStatementKey, string] // the statement's name
	// seenOnce are texts used once, spliced: prepared at the next use.
	seenOnce *lru.Cache[readStatementKey, struct{}]
	made     int // names handed out: the next one's number
	// closing are the statements evicted, closed with the next read.
	closing []string
	// lost: a read's statement was gone when it was bound (see
	// unit.readStatement); the read is run again.
	lost bool
	// rendered is the last Bound's text (renderedText).
	rendered renderedBound
	// scratch is the storage of the read boundReadOf returns, reused from
	// one read to the next: a read's messages are encoded as they are
	// sent, and nothing of it is kept past its answers.
	scratch boundRead
}

// readStatementKey is what a prepared read's statement depends on.
// types are the parameter types of a read the client sent as the unnamed
// statement's Parse (loop_parse.go), encoded; empty for a simple Query's
// read, whose text implies them.
type readStatementKey struct {
	text  string
	types string
	rev   int64
	path  string
}

// cache is the LRU, made at first use.
func (r *readStatements) cache() *lru.Cache[readStatementKey, string] {
	if r.byKey == nil {
		r.seenOnce, _ = lru.New[readStatementKey, struct{}](readStatementsPerConn)
		r.byKey, _ = lru.NewWithEvict(readStatementsPerConn, func(_ readStatementKey, name string) {
			r.closing = append(r.closing, name)
		}) // never fails: the size is positive
	}
	return r.byKey
}

// forgetAll forgets every prepared read: each is closed with the next read
// (closing one the client's DISCARD ALL dropped is no error).
func (r *readStatements) forgetAll() {
	if r.byKey != nil {
		r.byKey.Purge()
		r.seenOnce.Purge()
	}
}

// boundRead is a read's messages and the units that follow their answers.
type boundRead struct {
	msgs  []pgproto3.FrontendMessage
	units []unit
	// closing are the evicted statements closed by msgs, to close again
	// if the backend skips them (the guard failed).
	closing []string
	key     readStatementKey
	parsed  bool // msgs prepare the statement
	// The messages msgs point to, and the Bind's parameters (in buf).
	close    pgproto3.Close
	parse    pgproto3.Parse
	bind     pgproto3.Bind
	describe pgproto3.Describe
	execute  pgproto3.Execute
	sync     pgproto3.Sync
	values   [][]byte
	buf      []byte
}

// boundReadOf is the read of bd, with its timestamp holes rendered as
// tsText when it is not empty, else as a parameter of value ts, for the
// guard key g; nil at the text's first use.
func (r *readStatements) boundReadOf(bd *planner.Bound, g guardKey, tsText string, ts uint64) *boundRead {
	br := &r.scratch
	text, oids, values := br.params(r, bd, tsText, ts)
	key := readStatementKey{text: text, rev: g.rev, path: g.path}
	name, parsed, ok := r.statementFor(key)
	if !ok {
		return nil
	}
	br.key, br.parsed = key, parsed
	br.msgs, br.units = br.msgs[:0], br.units[:0]
	br.closing, r.closing = r.closing, nil
	for _, name := range br.closing {
		br.add(&pgproto3.Close{ObjectType: 'S', Name: name}, unit{kind: uClose, disp: swallow})
	}
	forget := r.forget(key)
	if parsed {
		// Closed first: a statement of that name may have outlived a
		// forgetAll the client's own DEALLOCATE caused.
		br.close = pgproto3.Close{ObjectType: 'S', Name: name}
		br.add(&br.close, unit{kind: uClose, disp: swallow})
		br.parse = pgproto3.Parse{Name: name, Query: text, ParameterOIDs: oids}
		br.add(&br.parse, unit{kind: uParse, disp: swallow, failed: forget})
	}
	br.bind = pgproto3.Bind{PreparedStatement: name, Parameters: values}
	br.add(&br.bind, unit{kind: uBind, disp: swallow, failed: forget, readStatement: true})
	br.describe = pgproto3.Describe{ObjectType: 'P'}
	br.add(&br.describe, unit{kind: uDescribePortal})
	br.execute = pgproto3.Execute{}
	br.add(&br.execute, unit{kind: uExecute})
	br.add(&br.sync, unit{kind: uSync, relayZ: true})
	return br
}

// statementFor is the name of the statement prepared for key, and
// whether it is to be prepared now (made: closed, then parsed, in front
// of its Bind); false at the key's first use, which is sent as it is.
func (r *readStatements) statementFor(key readStatementKey) (name string, made, ok bool) {
	c := r.cache()
	if name, ok := c.Get(key); ok {
		return name, false, true
	}
	if !r.seenOnce.Contains(key) {
		r.seenOnce.Add(key, struct{}{})
		return "", false, false
	}
	r.seenOnce.Remove(key)
	name = ownName("mzproxy_read_" + strconv.Itoa(r.made))
	r.made++
	c.Add(key, name) // may evict one: closed with the next read
	return name, true, true
}

// params are the text, parameter types and values of bd's statement,
// with its timestamp holes rendered as tsText when it is not empty, else
// as a last parameter of value ts. The values are in br's buffer, reused.
func (br *boundRead) params(r *readStatements, bd *planner.Bound, tsText string, ts uint64) (text string, oids []uint32, values [][]byte) {
	size := 20 // ts's digits at most
	for _, v := range bd.Values {
		size += len(v)
	}
	buf := slices.Grow(br.buf[:0], size)
	values = br.values[:0]
	for _, v := range bd.Values {
		// Not nil even when empty: nil is SQL NULL.
		buf = append(buf, v...)
		values = append(values, buf[len(buf)-len(v):len(buf):len(buf)])
	}
	text, oids = r.renderedText(bd, tsText)
	if len(oids) > len(values) {
		start := len(buf)
		buf = strconv.AppendUint(buf, ts, 10)
		values = append(values, buf[start:len(buf):len(buf)])
	}
	br.buf, br.values = buf, values
	return text, oids, values
}

// renderedBound is the text and parameter types a Bound's Template was
// rendered to last.
type renderedBound struct {
	tmpl   *planner.Template
	tsText string
	text   string
	oids   []uint32
}

// renderedText is the text of bd's statement, its timestamp holes
// rendered as tsText when it is not empty, else as a last parameter (an
// int8, after bd's), and its parameters' types. The last rendering is
// remembered: the Bounds of a cached skeleton whose literals are all
// parameters share their Template (issue 15: rendering it was the
// largest allocation of a repeated read). Templates are never modified.
func (r *readStatements) renderedText(bd *planner.Bound, tsText string) (string, []uint32) {
	if m := &r.rendered; m.tmpl == bd.Template && m.tsText == tsText {
		return m.text, m.oids
	}
	text, oids := "", bd.OIDs
	if tsText != "" || bd.Template.Holes() == 0 {
		text = bd.Template.Render(tsText)
	} else {
		text = bd.Template.Render("$" + strconv.Itoa(bd.Template.Param()) + "::int8")
		oids = append(oids[:len(oids):len(oids)], int8OID)
	}
	r.rendered = renderedBound{tmpl: bd.Template, tsText: tsText, text: text, oids: oids}
	return text, oids
}

func (br *boundRead) add(m pgproto3.FrontendMessage, u unit) {
	br.msgs = append(br.msgs, m)
	br.units = append(br.units, u)
}

// forget returns what forgets key's statement when preparing or binding
// it failed: it is closed and prepared again at its next use.
func (r *readStatements) forget(key readStatementKey) func() {
	return func() { r.cache().Remove(key) }
}

// undo undoes ps when the backend skipped the batch that closed and
// prepared its statements (the guard in front of it failed), or when it
// was not sent.
func (r *readStatements) undo(ps *parsedStmt) {
	r.closing = append(r.closing, ps.closing...)
	if ps.made {
		r.cache().Remove(ps.key) // its name is closed next time: harmless
	}
	ps.named, ps.made, ps.closing = false, false, nil
}

// skipped undoes br when the backend skipped its messages (the guard in
// front of them failed): nothing was closed or prepared.
func (r *readStatements) skipped(br *boundRead) {
	r.closing = append(r.closing, br.closing...)
	if br.parsed {
		r.cache().Remove(br.key) // its name is closed next time: harmless
	}
}
