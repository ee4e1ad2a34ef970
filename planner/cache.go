package planner

import (
	"hash/maphash"
	"reflect"
	"strings"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Planner plans query strings through an LRU cache of plans. It is safe for
// concurrent use.
//
// A cached plan records the catalog revision it was made at and every
// catalog lookup it made. A hit at the same revision is returned without
// parsing. A hit at another revision re-validates: the lookups are
// repeated, and if every name still resolves to the same definition (same
// ID, columns, history relation, view SQL; unmanaged names still
// unmanaged) the plan is reused and re-stamped; otherwise it is re-planned.
// So DDL on one table does not flush the plans of statements that do not
// depend on it.
type Planner struct {
	cache        *lru.Cache[cacheKey, *cached]
	hits, misses atomic.Uint64
	// literalsAtFirst makes a skeleton's literal plan at its first text
	// instead of its second (for tests of literal plans).
	literalsAtFirst bool
	fingerprints    fingerprintMemo
	plans           planMemo
	// shapes is planMemo for Shape, whose statements Plan may not return.
	shapes planMemo
}

// planMemo remembers the plans returned last, by text: a session plans one
// query string several times in a row with the same (empty) catalog (for
// its kind, the settings it names, whether it names its time), and a hit
// in the cache still splices the text's literals into a copy of the
// cached plan each time (issue 15: five plans of each timestamped read,
// four of them the same). A text hashes to one slot (the fingerprint
// memo's hash), which holds the last plan returned for a text there; a
// hit needs the same text, options, catalog (the same value, not only the
// same revision: two databases' catalogs may share a revision) and
// revision. Plans are never modified once made, so sessions share them.
type planMemo struct {
	slots [64]atomic.Pointer[memoPlan]
}

type memoPlan struct {
	key   cacheKey
	cat   Catalog
	rev   uint64
	stmts []*Statement
}

// slot is where the plan of key, for a catalog of a comparable type (an
// interface holding another cannot be compared), is remembered; nil when
// it is not.
func (p *Planner) memoSlot(key cacheKey, cat Catalog) *atomic.Pointer[memoPlan] {
	return p.plans.slot(p.fingerprints.seed, key, cat)
}

// slot is where m remembers the plan of key for cat (see memoSlot).
func (m *planMemo) slot(seed maphash.Seed, key cacheKey, cat Catalog) *atomic.Pointer[memoPlan] {
	if len(key.sql) > memoMaxText || !reflect.TypeOf(cat).Comparable() {
		return nil
	}
	return &m.slots[maphash.String(seed, key.sql)%uint64(len(m.slots))]
}

// fingerprintMemo remembers the fingerprints made last, by text: a session
// plans one query string several times in a row (for its kind, the
// settings it names, then its plan with the catalog), and lexing a text
// with new literals is most of what a cached plan costs (issue 15: four
// fingerprints of each timestamped read). A text hashes to one slot, which
// holds the last text fingerprinted there; fingerprints are never modified
// once made, so sessions share them.
type fingerprintMemo struct {
	seed  maphash.Seed
	slots [64]atomic.Pointer[memoFingerprint]
	made  atomic.Uint64 // fingerprints made, not found here (for tests)
}

type memoFingerprint struct {
	sql string
	fp  fingerprint
	ok  bool
}

// memoMaxText bounds the texts the memo keeps: a slot holds its text.
const memoMaxText = 8 << 10

// of is fingerprintOf(sql), made once for consecutive uses.
func (m *fingerprintMemo) of(sql string) (fingerprint, bool) {
	if len(sql) > memoMaxText {
		m.made.Add(1)
		return fingerprintOf(sql)
	}
	slot := &m.slots[maphash.String(m.seed, sql)%uint64(len(m.slots))]
	if e := slot.Load(); e != nil && e.sql == sql {
		return e.fp, e.ok
	}
	m.made.Add(1)
	fp, ok := fingerprintOf(sql)
	slot.Store(&memoFingerprint{sql: sql, fp: fp, ok: ok})
	return fp, ok
}

type cacheKey struct {
	sql     string
	path    string // search_path joined by NUL
	history bool
	kind    keyKind
}

// keyKind is what a cache key's sql is: keys of different kinds never
// name the same plan.
type keyKind uint8

const (
	exactKey       keyKind = iota // the query string
	fingerprintKey                // its fingerprint (fingerprint.go)
	skeletonKey                   // its skeleton (literals.go)
)

type cached struct {
	stmts    []*Statement
	deps     []dep
	revision uint64
	// text is the query string planned, for a plan cached under its
	// fingerprint: another text gets copies with its own SQL.
	text string
	// literals makes the plan of another text of the skeleton, for a plan
	// cached under its skeleton.
	literals *literalPlan
	// cat is the catalog the plan was made or last validated with: a
	// plan is reused unchecked only with the same catalog at the same
	// revision (another database's may be at that revision too).
	cat Catalog
	// seenOnce marks a skeleton seen in one text only: its literal plan
	// (another plan of the text, with markers) is made at the second, so
	// that texts that never repeat (a test corpus under --history-reads)
	// do not pay for it.
	seenOnce bool
}

// New returns a Planner caching up to cacheSize plans (no cache if
// cacheSize <= 0).
func New(cacheSize int) *Planner {
	p := &Planner{fingerprints: fingerprintMemo{seed: maphash.MakeSeed()}}
	if cacheSize > 0 {
		c, err := lru.New[cacheKey, *cached](cacheSize)
		if err != nil {
			panic(err) // only for size <= 0
		}
		p.cache = c
	}
	return p
}

// Plan plans every statement of a query string (a simple Query may hold
// several; an empty string has none). Errors are *pgerr.Error; syntax
// errors carry SQLSTATE 42601, PostgreSQL's message and position, and match
// errors.Is(err, ErrSyntax). The result may be shared: do not modify it.
//
// A plan is cached under the query's exact text, or under its fingerprint
// when nothing in it depends on the literals but each statement's SQL
// (literalFree): then a query that differs only in its literals is a hit,
// found without parsing, and gets copies of the statements with its own
// SQL. A plan whose AS OF or Template depends on the literals (a
// timestamped read) is cached under the query's skeleton when its
// literals' places are known (literals.go), from the skeleton's second
// text on: a text that differs only in its literals is a hit too, without
// parsing.
func (p *Planner) Plan(sql string, cat Catalog, opts Options) ([]*Statement, error) {
	if p.cache == nil {
		p.misses.Add(1)
		stmts, _, err := plan(sql, cat, opts)
		return stmts, err
	}
	key := cacheKey{sql: sql, path: joinPath(opts.SearchPath), history: opts.ExplicitTimestamp}
	rev := cat.Revision()
	slot := p.memoSlot(key, cat)
	if slot != nil {
		if e := slot.Load(); e != nil && e.key == key && e.rev == rev && e.cat == cat {
			p.hits.Add(1)
			return e.stmts, nil
		}
	}
	stmts, err := p.planCached(key, cat, opts, rev, false)
	if err == nil && slot != nil {
		slot.Store(&memoPlan{key: key, cat: cat, rev: rev, stmts: stmts})
	}
	return stmts, err
}

// Shape is Plan for callers that need a query string's statements' kinds
// and flags only (Kind, Tag, Params, relations, UsesMzNow, Locking,
// whether AsOf is set, ...), not the values of its literals: a read or
// write planned from a cached skeleton or fingerprint is then the cached
// plan of another text with the same skeleton, not a copy with this
// text's literals spliced in (issue 15: half the cost of a cached plan,
// made for nothing by the routing, settings and observer checks of every
// timestamped read). Such a statement's SQL, AsOf.Expr, Template and Bound
// may be another text's. Statements that keep literal values (SET, RETAIN
// HISTORY, transaction and cursor statements, SUBSCRIBE, EXPLAIN
// TIMESTAMP) are never cached that way: Shape returns their full plan.
func (p *Planner) Shape(sql string, cat Catalog, opts Options) ([]*Statement, error) {
	if p.cache == nil {
		return p.Plan(sql, cat, opts)
	}
	key := cacheKey{sql: sql, path: joinPath(opts.SearchPath), history: opts.ExplicitTimestamp}
	rev := cat.Revision()
	// The text's plan, or its shape, remembered: a session asks for the
	// shape of a text several times in a row.
	if slot := p.memoSlot(key, cat); slot != nil {
		if e := slot.Load(); e != nil && e.key == key && e.rev == rev && e.cat == cat {
			p.hits.Add(1)
			return e.stmts, nil
		}
	}
	slot := p.shapes.slot(p.fingerprints.seed, key, cat)
	if slot != nil {
		if e := slot.Load(); e != nil && e.key == key && e.rev == rev && e.cat == cat {
			p.hits.Add(1)
			return e.stmts, nil
		}
	}
	stmts, err := p.planCached(key, cat, opts, rev, true)
	if err == nil && slot != nil {
		// Not in Plan's memo: Plan would return another text's SQL.
		slot.Store(&memoPlan{key: key, cat: cat, rev: rev, stmts: stmts})
	}
	return stmts, err
}

// planCached is Plan through the cache, for the key and revision rev; with
// shape, Shape.
func (p *Planner) planCached(key cacheKey, cat Catalog, opts Options, rev uint64, shape bool) ([]*Statement, error) {
	sql := key.sql
	if c := p.lookup(key, cat, opts.SearchPath, rev); c != nil {
		p.hits.Add(1)
		return c.stmts, nil
	}
	// A text without literals stays under its exact key: its next hit is
	// the one above, without lexing.
	fp, fpOK := p.fingerprints.of(sql)
	fpOK = fpOK && len(fp.lits) > 0
	fpKey, skKey := key, key
	// skeletonKnown: the skeleton has an entry, which this text cannot use
	// (its plan cannot be cached under the skeleton, or a literal of this
	// text is spelled by its value): keep it, plan this text on its own.
	// skeletonSeen: another text of the skeleton was planned (seenOnce).
	var skeletonKnown, skeletonSeen bool
	if fpOK {
		fpKey.sql, fpKey.kind = fp.key, fingerprintKey
		if c := p.lookup(fpKey, cat, opts.SearchPath, rev); c != nil && len(c.stmts) == len(fp.stmts) {
			p.hits.Add(1)
			if shape {
				return c.stmts, nil
			}
			return c.withText(sql, fp.stmts), nil
		}
		skKey.sql, skKey.kind = skeleton(sql, fp.lits), skeletonKey
		if c := p.lookup(skKey, cat, opts.SearchPath, rev); c != nil {
			if shape && c.literals != nil {
				p.hits.Add(1)
				return c.stmts, nil
			}
			if stmts, ok := c.withLiterals(sql, fp.lits); ok {
				p.hits.Add(1)
				return stmts, nil
			}
			skeletonSeen = c.seenOnce
			skeletonKnown = !skeletonSeen
		}
	}
	p.misses.Add(1)
	stmts, deps, err := plan(sql, cat, opts)
	if err != nil {
		return nil, err // errors are not cached: they are rare and cheap to repeat
	}
	switch {
	case fpOK && literalFree(stmts, sql, fp.stmts):
		p.add(fpKey, cat, &cached{stmts: stmts, deps: deps, revision: rev, text: sql})
		return stmts, nil
	case fpOK && !skeletonKnown && literalPlannable(stmts):
		if !skeletonSeen && !p.literalsAtFirst {
			p.add(skKey, cat, &cached{deps: deps, revision: rev, seenOnce: true})
			break
		}
		lp, withBound := newLiteralPlan(sql, fp, stmts, cat, opts)
		if lp != nil {
			stmts = withBound
			p.add(skKey, cat, &cached{stmts: stmts, deps: deps, revision: rev, text: sql, literals: lp})
			return stmts, nil
		}
		// Remembered, so that the next text of the skeleton does not
		// plan its marker text again.
		p.add(skKey, cat, &cached{deps: deps, revision: rev})
	}
	p.add(key, cat, &cached{stmts: stmts, deps: deps, revision: rev})
	return stmts, nil
}

// lookup returns the plan cached under key if it is still valid at the
// catalog's revision rev (re-stamping it), or nil.
func (p *Planner) lookup(key cacheKey, cat Catalog, path []string, rev uint64) *cached {
	c, ok := p.cache.Get(key)
	switch {
	case !ok:
		return nil
	case c.revision == rev && sameCatalog(c.cat, cat):
		return c
	case stillValid(c.deps, cat, path):
		c = &cached{stmts: c.stmts, deps: c.deps, revision: rev, text: c.text, literals: c.literals, seenOnce: c.seenOnce}
		p.add(key, cat, c)
		return c
	}
	return nil
}

// add caches c under key, made or validated with cat.
func (p *Planner) add(key cacheKey, cat Catalog, c *cached) {
	c.cat = cat
	p.cache.Add(key, c)
}

// sameCatalog reports whether a and b are the same catalog: the same
// value, for catalogs of a comparable type; for others (which cannot be
// told apart) the same type.
func sameCatalog(a, b Catalog) bool {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) {
		return false
	}
	return !ta.Comparable() || a == b
}

// withText returns the plan for sql, a query string with the same
// fingerprint as the one planned whose statements are at spans: the
// cached statements themselves for the same text, else copies with
// sql's statements as their SQL.
func (c *cached) withText(sql string, spans []span) []*Statement {
	if sql == c.text {
		return c.stmts
	}
	out := make([]*Statement, len(c.stmts))
	copies := make([]Statement, len(c.stmts))
	for i, st := range c.stmts {
		copies[i] = *st
		copies[i].SQL = sql[spans[i].start:spans[i].end]
		out[i] = &copies[i]
	}
	return out
}

// withLiterals returns the plan for sql, a query string with the skeleton
// of the one planned whose literals are lits (see literalPlan); false
// when there is none.
func (c *cached) withLiterals(sql string, lits []literal) ([]*Statement, bool) {
	switch {
	case c.literals == nil:
		return nil, false
	case sql == c.text:
		return c.stmts, true
	}
	return c.literals.statements(c.stmts, sql, lits)
}

// literalFree reports whether the plan of a query string depends on its
// literals only through each statement's SQL, so that it may be reused for
// a query string with the same fingerprint and other literals. That holds
// for plain reads, writes, EXPLAIN and COPY ... TO: their kind, tag,
// relations and parameters come from the tokens around the literals. It
// does not hold for what keeps literals' values (AS OF, RETAIN HISTORY,
// SET, transaction and cursor details, SUBSCRIBE, EXPLAIN TIMESTAMP) nor
// for a rewritten read (Template holds the deparsed text, literals and
// all): those are cached under their skeleton (literals.go) or their exact
// text. The SQL of each statement
// must be its span of the text, unchanged, so that a copy's SQL can be
// taken from the new text.
func literalFree(stmts []*Statement, sql string, spans []span) bool {
	if len(stmts) != len(spans) {
		return false
	}
	for i, st := range stmts {
		switch st.Kind {
		case KindRead, KindWrite, KindExplain, KindCopyTo:
		default:
			return false
		}
		if st.Template != nil || st.AsOf != nil || st.UsesMzNow || st.Retention != nil ||
			st.Subscribe != nil || st.ExplainTimestamp != nil || st.Txn != nil || st.Var != nil ||
			st.Cursor != nil || st.Deallocate != "" || st.SQL != sql[spans[i].start:spans[i].end] {
			return false
		}
	}
	return true
}

// stillValid repeats a plan's catalog lookups.
func stillValid(deps []dep, cat Catalog, path []string) bool {
	for _, d := range deps {
		var o *Object
		if d.schema != "" || !isSystemRelation(d.name, path) {
			if x, ok := cat.Lookup(d.schema, d.name, path); ok {
				o = x
			}
		}
		switch {
		case o == nil && d.obj == nil:
		case o == nil || d.obj == nil || !o.sameDefinition(d.obj):
			return false
		}
	}
	return true
}

func joinPath(path []string) string {
	switch len(path) {
	case 0:
		return ""
	case 1:
		return path[0]
	}
	return strings.Join(path, "\x00")
}

// CacheStats are the plan cache's counters.
type CacheStats struct {
	Hits, Misses uint64
	Len          int
}

// Stats returns the cache's hit and miss counts and current size.
func (p *Planner) Stats() CacheStats {
	s := CacheStats{Hits: p.hits.Load(), Misses: p.misses.Load()}
	if p.cache != nil {
		s.Len = p.cache.Len()
	}
	return s
}

// Purge empties the cache.
func (p *Planner) Purge() {
	if p.cache != nil {
		p.cache.Purge()
	}
	for i := range p.plans.slots {
		p.plans.slots[i].Store(nil)
		p.shapes.slots[i].Store(nil)
	}
}
