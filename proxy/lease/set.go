package lease

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Set keeps a proxy's leases, one per database: Get registers in a
// database on its first use, and again after the lease was lost (expired
// or closed). A database's generation is fixed by the first registration
// there (so a proxy started with Generation 0 that a newer generation
// fenced stays fenced instead of joining the newer one; generations are
// per database, like the rest of the backend state).
type Set struct {
	cfg  Config
	dial func(ctx context.Context, database string) (*pgx.Conn, error)

	mu      sync.Mutex
	entries map[string]*setEntry
	closed  bool
}

type setEntry struct {
	mu  sync.Mutex // held while registering
	l   *Lease
	gen uint64 // the generation to register with (0 until the first registration)
}

// ErrSetClosed is returned by Get after Close.
var ErrSetClosed = errors.New("lease: set is closed")

// NewSet returns a Set registering with cfg (cfg.Dial is ignored: dial
// connects to a named database as a superuser).
func NewSet(cfg Config, dial func(ctx context.Context, database string) (*pgx.Conn, error)) *Set {
	if cfg.Ticks == nil {
		cfg.Ticks = &TickCounters{} // one count for all the leases
	}
	return &Set{cfg: cfg, dial: dial, entries: map[string]*setEntry{}}
}

// Ticks counts the ticks of every lease of the set (Config.TickInterval).
func (s *Set) Ticks() *TickCounters { return s.cfg.Ticks }

// Get returns the live lease of database, registering first when there is
// none or the last one was lost. Registration failing because a newer
// generation fenced this proxy returns an error wrapping ErrLost.
func (s *Set) Get(ctx context.Context, database string) (*Lease, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSetClosed
	}
	e := s.entries[database]
	if e == nil {
		e = &setEntry{gen: s.cfg.Generation}
		s.entries[database] = e
	}
	s.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.l != nil && e.l.Err() == nil {
		return e.l, nil
	}
	if e.l != nil {
		_ = e.l.Close(ctx) // lost: stops its loop and connection
		e.l = nil
	}
	cfg := s.cfg
	cfg.Generation = e.gen
	cfg.Dial = func(ctx context.Context) (*pgx.Conn, error) { return s.dial(ctx, database) }
	l, err := Register(ctx, cfg)
	if err != nil {
		if databaseGone(err) {
			// Nothing is left to remember of a database that is gone.
			s.drop(database, e)
		}
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close(ctx)
		return nil, ErrSetClosed
	}
	s.mu.Unlock()
	e.l, e.gen = l, l.Generation()
	return l, nil
}

// Forget drops the lease of database without retiring its incarnation,
// for a database that was dropped and made again under the same name: the
// incarnation's id may belong to another proxy there now. The next Get
// registers anew.
func (s *Set) Forget(database string) { s.abandon(database, false) }

// Detach takes the lease of database out of the set without closing it
// (the caller closes it), for a database the proxy stopped using: the
// next Get registers anew, with the generation of the last registration.
// When the lease was lost because the database is gone, the database's
// entry goes too.
func (s *Set) Detach(database string) *Lease {
	s.mu.Lock()
	e := s.entries[database]
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.l
	e.l = nil
	if l != nil && l.Gone() {
		s.drop(database, e)
	}
	return l
}

// Remove forgets database, which was dropped: its lease is abandoned (the
// incarnation went with the database) and its entry removed, so that a
// database made again under the name starts from scratch.
func (s *Set) Remove(database string) { s.abandon(database, true) }

// abandon abandons the lease of database without retiring its
// incarnation and, with remove, removes the database's entry.
func (s *Set) abandon(database string, remove bool) {
	s.mu.Lock()
	e := s.entries[database]
	s.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.l != nil {
		e.l.abandon()
		e.l = nil
	}
	if remove {
		s.drop(database, e)
	}
}

// drop removes entry e of database (e.mu held).
func (s *Set) drop(database string, e *setEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[database] == e {
		delete(s.entries, database)
	}
}

// Len is the number of databases the set has an entry for.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Leases returns the leases held now, by database (lost ones included
// until the next Get replaces them).
func (s *Set) Leases() map[string]*Lease {
	s.mu.Lock()
	entries := make(map[string]*setEntry, len(s.entries))
	for db, e := range s.entries {
		entries[db] = e
	}
	s.mu.Unlock()
	out := map[string]*Lease{}
	for db, e := range entries {
		e.mu.Lock()
		if e.l != nil {
			out[db] = e.l
		}
		e.mu.Unlock()
	}
	return out
}

// Close closes every lease (retiring the incarnations); Get fails
// afterwards.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	entries := s.entries
	s.entries = map[string]*setEntry{}
	s.mu.Unlock()
	var errs []error
	for _, e := range entries {
		e.mu.Lock()
		if e.l != nil {
			errs = append(errs, e.l.Close(ctx))
			e.l = nil
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}
