package planner

import (
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
}

type cacheKey struct {
	sql     string
	path    string // search_path joined by NUL
	history bool
}

type cached struct {
	stmts    []*Statement
	deps     []dep
	revision uint64
}

// New returns a Planner caching up to cacheSize plans (no cache if
// cacheSize <= 0).
func New(cacheSize int) *Planner {
	p := &Planner{}
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
func (p *Planner) Plan(sql string, cat Catalog, opts Options) ([]*Statement, error) {
	if p.cache == nil {
		p.misses.Add(1)
		stmts, _, err := plan(sql, cat, opts)
		return stmts, err
	}
	key := cacheKey{sql: sql, path: joinPath(opts.SearchPath), history: opts.ExplicitTimestamp}
	rev := cat.Revision()
	if c, ok := p.cache.Get(key); ok {
		if c.revision == rev {
			p.hits.Add(1)
			return c.stmts, nil
		}
		if stillValid(c.deps, cat, opts.SearchPath) {
			p.hits.Add(1)
			p.cache.Add(key, &cached{stmts: c.stmts, deps: c.deps, revision: rev})
			return c.stmts, nil
		}
	}
	p.misses.Add(1)
	stmts, deps, err := plan(sql, cat, opts)
	if err != nil {
		return nil, err // errors are not cached: they are rare and cheap to repeat
	}
	p.cache.Add(key, &cached{stmts: stmts, deps: deps, revision: rev})
	return stmts, nil
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
}
