package proxy

import (
	"context"
	"time"

	"github.com/mzproxy/mzproxy/proxy/lease"
)

// Idle databases: mzproxy's own connections to a database (its catalog
// connection, its lease's heartbeats, ticks and compaction) keep that
// database from being dropped (55006, "being accessed by other users"),
// and the owner of a database cannot end them even WITH (FORCE) (42501:
// they are a superuser's). So they last only while the proxy serves the
// database: once a database has had no client session of this proxy for
// Config.IdleRelease, the proxy closes its catalog connection and retires
// its incarnation there (deregister), and forgets the database; the next
// session registers again. The backend's default database (--backend's),
// whose lease and catalog readiness reports on, is kept.

// DefaultIdleRelease is Config.IdleRelease's default.
const DefaultIdleRelease = 5 * time.Second

// idleRelease is how long a database stays served without sessions; < 0:
// forever.
func (p *Proxy) idleRelease() time.Duration {
	if p.cfg.IdleRelease == 0 {
		return DefaultIdleRelease
	}
	return p.cfg.IdleRelease
}

// defaultDatabase is the backend's default database, the one the proxy
// registers in at its start.
func (p *Proxy) defaultDatabase() string {
	if p.cfg.Backend.Database != "" {
		return p.cfg.Backend.Database
	}
	return p.cfg.Backend.User
}

// enterDatabase counts a session starting in database name and returns
// the database's state.
func (p *Proxy) enterDatabase(name string) *database {
	p.dbMu.Lock()
	defer p.dbMu.Unlock()
	db := p.databaseLocked(name)
	db.users++
	if db.idle != nil {
		db.idle.Stop()
		db.idle = nil
	}
	return db
}

// leaveDatabase counts a session of db gone; the last one starts the
// idle timer.
func (p *Proxy) leaveDatabase(db *database) {
	if db == nil {
		return
	}
	p.dbMu.Lock()
	defer p.dbMu.Unlock()
	db.users--
	d := p.idleRelease()
	if db.users > 0 || p.dbsClosed || d < 0 || db.name == p.defaultDatabase() || p.dbs[db.name] != db {
		return
	}
	if db.idle != nil {
		db.idle.Stop()
	}
	db.idle = time.AfterFunc(d, func() { p.releaseIdle(db) })
}

// releaseIdle lets go of db if it still has no session.
func (p *Proxy) releaseIdle(db *database) {
	p.dbMu.Lock()
	if db.users > 0 || p.dbsClosed || p.dbs[db.name] != db {
		p.dbMu.Unlock()
		return
	}
	db.idle = nil
	p.letGoLocked(db)
}

// letGo closes this proxy's connections to database name and retires
// its incarnation there, whether or not sessions are in it (a DROP
// DATABASE that may end them is about to run: dropdb.go).
func (p *Proxy) letGo(name string) {
	p.dbMu.Lock()
	db := p.dbs[name]
	if db == nil {
		l := p.leases.Detach(name)
		p.dbMu.Unlock()
		closeLease(l)
		return
	}
	p.letGoLocked(db)
}

// letGoLocked is letGo of db; it is called with p.dbMu held and unlocks
// it. The database is forgotten when no session is in it (a session's
// start finds it again). Its lease is taken out of the set under dbMu,
// so a session that starts from here on registers anew rather than get
// the lease being closed.
func (p *Proxy) letGoLocked(db *database) {
	if db.users == 0 {
		delete(p.dbs, db.name)
	}
	l := p.leases.Detach(db.name)
	p.dbMu.Unlock()
	db.closeConn()
	closeLease(l)
}

// closeLease retires l's incarnation (nil: none).
func closeLease(l *lease.Lease) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.Close(ctx)
}

// forgetDropped forgets database name, which a client just dropped: its
// lease's entry goes (a database made again under the name starts from
// scratch), and so does its state unless a session still counts in it
// (one ending: a DROP ... WITH (FORCE) ended it).
func (p *Proxy) forgetDropped(name string) {
	p.dbMu.Lock()
	db := p.dbs[name]
	if db != nil && db.users == 0 {
		if db.idle != nil {
			db.idle.Stop()
			db.idle = nil
		}
		delete(p.dbs, name)
	} else {
		db = nil
	}
	p.dbMu.Unlock()
	if db != nil {
		db.closeConn()
	}
	p.leases.Remove(name)
}

// stopIdle stops the idle timers: the proxy is closing.
func (p *Proxy) stopIdle() {
	p.dbMu.Lock()
	defer p.dbMu.Unlock()
	p.dbsClosed = true
	for _, db := range p.dbs {
		if db.idle != nil {
			db.idle.Stop()
			db.idle = nil
		}
	}
}
