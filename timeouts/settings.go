package timeouts

import (
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Source is one of the layers beneath a session's own SET commands. A
// higher Source wins over a lower one; any SET wins over all of them.
type Source uint8

// The layers, lowest precedence first.
const (
	// SourceConfig is mzproxy's configured default.
	SourceConfig Source = iota
	// SourceBackend is the role/database default the backend applies at
	// connection start (ALTER ROLE/DATABASE ... SET).
	SourceBackend
	// SourceStartup is a value from the client's StartupMessage: an
	// options switch (-c name=value) or a parameter sent directly.
	SourceStartup
	numSources
)

// Codes PostgreSQL uses here that the pgerr package does not name.
const (
	noActiveSQLTransaction  pgerr.Code = "25P01"
	invalidSavepointSpec    pgerr.Code = "3B001"
	unrecognizedParamFormat            = `unrecognized configuration parameter "%s"`
)

// Settings holds one session's tracked settings and their layers. The zero
// value is ready: everything disabled, no transaction open.
//
// Settings is not safe for concurrent use; the session's goroutine owns it.
type Settings struct {
	params [numParams]param
	// txn is nil outside a transaction block. txn[0] is the block itself
	// (what ROLLBACK restores), each later entry one open savepoint.
	txn []frame
}

// slot is an optional value in milliseconds.
type slot struct {
	ms  int32
	set bool
}

type param struct {
	defaults [numSources]slot
	session  slot // SET: kept at commit
	local    slot // SET LOCAL: gone at transaction end
}

// frame remembers the SET and SET LOCAL values in force when a transaction
// block or savepoint began, which is all a rollback to it needs to restore.
type frame struct {
	savepoint string
	saved     [numParams]struct{ session, local slot }
}

func (s *Settings) lookup(name string) (*param, error) {
	p, ok := LookupParam(name)
	if !ok {
		return nil, pgerr.New(pgerr.UndefinedObject, unrecognizedParamFormat, name)
	}
	return &s.params[p], nil
}

func parseSlot(name, value string) (slot, error) {
	d, err := Parse(name, value)
	if err != nil {
		return slot{}, err
	}
	return slot{ms: int32(d / time.Millisecond), set: true}, nil
}

// SetDefault sets the layer src of name to value. It knows only the tracked
// settings (see LookupParam) and rejects any other name with 42704; pass
// the rest of a StartupMessage on to the backend. An error for
// SourceStartup is FATAL, as PostgreSQL ends a connection whose startup
// settings it cannot apply.
func (s *Settings) SetDefault(src Source, name, value string) error {
	p, err := s.lookup(name)
	if err == nil {
		var v slot
		if v, err = parseSlot(name, value); err == nil {
			p.defaults[src] = v
			return nil
		}
	}
	if src == SourceStartup {
		err.(*pgerr.Error).Severity = pgerr.SeverityFatal
	}
	return err
}

// Set applies SET name = value, or SET LOCAL when local is true.
//
// Outside a transaction block SET LOCAL changes nothing: PostgreSQL runs it
// in a single-statement transaction that ends at once, and warns (25P01
// "SET LOCAL can only be used in transaction blocks"); sending that warning
// is the caller's job. On an error nothing changes; the caller must treat a
// transaction block as failed, as PostgreSQL does.
func (s *Settings) Set(name, value string, local bool) error {
	p, err := s.lookup(name)
	if err != nil {
		return err
	}
	v, err := parseSlot(name, value)
	if err != nil {
		return err
	}
	s.assign(p, v, local)
	return nil
}

// Reset applies RESET name (local false), which is also SET name TO
// DEFAULT, or SET LOCAL name TO DEFAULT (local true): the value falls back
// to the highest layer set with SetDefault.
func (s *Settings) Reset(name string, local bool) error {
	p, err := s.lookup(name)
	if err != nil {
		return err
	}
	if local {
		s.assign(p, p.resetValue(), true)
	} else {
		s.assign(p, slot{}, false)
	}
	return nil
}

// ResetAll applies RESET ALL to the tracked settings. Like RESET it is
// undone by a rollback.
func (s *Settings) ResetAll() {
	for i := range s.params {
		s.assign(&s.params[i], slot{}, false)
	}
}

func (s *Settings) assign(p *param, v slot, local bool) {
	if local {
		if s.txn != nil {
			p.local = v
		}
		return
	}
	// A SET overrides an earlier SET LOCAL of the same transaction: it is
	// the value in force now and the value kept at commit.
	p.session, p.local = v, slot{}
}

func (p *param) resetValue() slot {
	for src := numSources - 1; ; src-- {
		if p.defaults[src].set {
			return p.defaults[src]
		}
		if src == 0 {
			return slot{set: true}
		}
	}
}

func (p *param) effective() slot {
	switch {
	case p.local.set:
		return p.local
	case p.session.set:
		return p.session
	}
	return p.resetValue()
}

// Effective returns the value of p in force now; zero means disabled.
func (s *Settings) Effective(p Param) time.Duration {
	return time.Duration(s.params[p].effective().ms) * time.Millisecond
}

// Show returns the value of name as SHOW prints it.
func (s *Settings) Show(name string) (string, error) {
	p, err := s.lookup(name)
	if err != nil {
		return "", err
	}
	return Format(time.Duration(p.effective().ms) * time.Millisecond), nil
}

// InTransaction reports whether a transaction block is open.
func (s *Settings) InTransaction() bool { return s.txn != nil }

func (s *Settings) snapshot(savepoint string) frame {
	f := frame{savepoint: savepoint}
	for i, p := range s.params {
		f.saved[i].session, f.saved[i].local = p.session, p.local
	}
	return f
}

func (s *Settings) restore(f *frame) {
	for i := range s.params {
		s.params[i].session, s.params[i].local = f.saved[i].session, f.saved[i].local
	}
}

// Begin marks the start of a transaction block: BEGIN, or the implicit
// block of a multi-statement Query message. Inside a block it does nothing
// (PostgreSQL warns "there is already a transaction in progress").
func (s *Settings) Begin() {
	if s.txn == nil {
		s.txn = []frame{s.snapshot("")}
	}
}

// Commit ends the transaction block successfully: SET values stay, SET
// LOCAL values end. Outside a block it does nothing.
func (s *Settings) Commit() {
	if s.txn == nil {
		return
	}
	for i := range s.params {
		s.params[i].local = slot{}
	}
	s.txn = nil
}

// Rollback ends the transaction block unsuccessfully: every SET, SET LOCAL
// and RESET made in it is undone. COMMIT of a failed block is a Rollback.
// Outside a block it does nothing.
func (s *Settings) Rollback() {
	if s.txn == nil {
		return
	}
	s.restore(&s.txn[0])
	s.txn = nil
}

// Savepoint marks SAVEPOINT name.
func (s *Settings) Savepoint(name string) error {
	if s.txn == nil {
		return pgerr.New(noActiveSQLTransaction, "SAVEPOINT can only be used in transaction blocks")
	}
	s.txn = append(s.txn, s.snapshot(name))
	return nil
}

// ReleaseSavepoint applies RELEASE SAVEPOINT name: the savepoint and all
// later ones are forgotten and their changes kept.
func (s *Settings) ReleaseSavepoint(name string) error {
	i, err := s.findSavepoint(name, "RELEASE SAVEPOINT")
	if err != nil {
		return err
	}
	s.txn = s.txn[:i]
	return nil
}

// RollbackToSavepoint applies ROLLBACK TO SAVEPOINT name: changes made
// since the savepoint are undone, later savepoints are forgotten, and the
// savepoint itself stays, as in PostgreSQL.
func (s *Settings) RollbackToSavepoint(name string) error {
	i, err := s.findSavepoint(name, "ROLLBACK TO SAVEPOINT")
	if err != nil {
		return err
	}
	s.restore(&s.txn[i])
	s.txn = s.txn[:i+1]
	return nil
}

// findSavepoint returns the index of the latest savepoint called name.
func (s *Settings) findSavepoint(name, command string) (int, error) {
	if s.txn == nil {
		return 0, pgerr.New(noActiveSQLTransaction, "%s can only be used in transaction blocks", command)
	}
	for i := len(s.txn) - 1; i > 0; i-- {
		if s.txn[i].savepoint == name {
			return i, nil
		}
	}
	return 0, pgerr.New(invalidSavepointSpec, `savepoint "%s" does not exist`, name)
}
