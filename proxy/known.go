package proxy

import "github.com/mzproxy/mzproxy/planner"

// What the proxy knows of its backend session without asking it. A read
// that needs the session's search_path (to resolve names) or a read-only
// transaction that needs its isolation level and read-only mode (to pin
// it) would otherwise ask with a round trip of its own each time.
//
// Knowledge is learned from the backend's own answers (a SHOW the proxy
// had to run anyway) and forgotten as soon as a statement passes through
// whose text could change it: it names the setting, calls set_config,
// RESETs or DISCARDs, or ends a transaction in a rollback (which undoes a
// SET made in it). The scan is textual and so errs towards forgetting. A
// change no text shows (a PL/pgSQL function that runs SET) is not seen
// here, so nothing relies on this knowledge unchecked: a pin reads the
// search_path and checks the guessed characteristics in its own round
// trip (a wrong guess fails the transaction with 40001, knownTxnMismatch),
// and a guarded read checks the search_path it was planned with
// (seen_read.go).
type knownSession struct {
	// searchPath is the backend's search_path as SHOW answered it; nil
	// when unknown.
	searchPath []string
	// searchPathShown is searchPath as SHOW spelled it: a read planned
	// with it checks it in its guard (readGuardSQL).
	searchPathShown string
	// pathProvisional: searchPath was read in a transaction block after a
	// statement of that block that may have set it (SET LOCAL, or a SET
	// that a ROLLBACK undoes): it holds until the block ends.
	pathProvisional bool
	// dirtyInBlock: a statement of the current block may have changed a
	// setting the proxy follows.
	dirtyInBlock bool
	// defaults are the characteristics a transaction begun by a plain
	// BEGIN has: default_transaction_isolation and
	// default_transaction_read_only, learned at such a transaction's pin.
	defaults txnCharacteristics
	// noIdleTimeout: the session's last peek (viewPeekSQL) or gated pin
	// (noteGatedPin) found its idle_in_transaction_session_timeout 0, and
	// no statement since named a setting the proxy follows: the event
	// loop may answer a plain BEGIN itself (replyBegin), the backend
	// having nothing to time until the transaction's first statement.
	noIdleTimeout bool
	// settled is what the session's pins found of the database's writes
	// (txn.go, peekBeforeBegin): a text that may restrict views
	// (viewRestrictionWords) makes the next transaction ask pin_peek,
	// which tells.
	settled settledWrites
}

// txnCharacteristics are a backend transaction's isolation level and
// read-only mode, as SHOW transaction_isolation and transaction_read_only
// answer them.
type txnCharacteristics struct {
	known     bool
	isolation string // PostgreSQL's name, lower case: "read committed", ...
	readOnly  bool
}

// forgetWords are the words whose presence in a statement's text makes the
// proxy forget what it knows of the session's settings. Lower case.
var forgetWords = []string{
	"search_path", "set_config", "reset", "discard", "rollback", "abort",
	"default_transaction", "characteristics", "restrict_nonsystem",
	"idle_in_transaction",
}

// viewRestrictionWords are the forgetWords of a text that may make the
// session restrict views, which pin_peek tells (txn.go): one that names
// restrict_nonsystem_relation_kind or calls set_config. A function's SET
// clause restricts them unseen; the check or the guard then learns it
// from PostgreSQL's refusal, when the backend plans it again (README,
// Limitations).
var viewRestrictionWords = []string{"restrict_nonsystem", "set_config"}

// forgetSet and viewRestrictionSet are forgetWords and
// viewRestrictionWords, their tables built once.
var forgetSet, viewRestrictionSet = planner.NewFoldWords(forgetWords...), planner.NewFoldWords(viewRestrictionWords...)

// noteStatementText forgets what sql may change, before it runs, and
// notes a text that may make a temporary relation (temps.go).
func (s *Session) noteStatementText(sql string) {
	if sql == s.quietText {
		return
	}
	if !noteSet.In(sql) {
		s.quietText = sql
		return
	}
	if !s.tempSeen && tempSet.In(sql) && saysTemp(sql) {
		s.tempSeen = true
	}
	if !forgetSet.In(sql) {
		s.quietText = sql
		return
	}
	s.known.searchPath, s.known.searchPathShown = nil, ""
	s.forgetOwnBuilt()
	s.known.defaults = txnCharacteristics{}
	s.known.noIdleTimeout = false
	if viewRestrictionSet.In(sql) {
		s.known.settled.steady = false
	}
	// Until the block ends (a later BEGIN, or the end of the block sql
	// may begin), what is read may be undone by its end.
	s.known.dirtyInBlock = true
}

// learnSearchPath keeps the search_path the backend just reported, as SHOW
// spelled it.
func (s *Session) learnSearchPath(shown string) {
	path := parseSearchPath(shown)
	if path == nil {
		path = []string{}
	}
	s.known.searchPath, s.known.searchPathShown = path, shown
	s.known.pathProvisional = s.tx != txIdle && s.known.dirtyInBlock
}

// endBlockKnowledge follows the end of a transaction block: what was read
// in it after it may have changed a setting can be undone by its end.
func (s *Session) endBlockKnowledge() {
	if s.known.pathProvisional {
		s.known.searchPath, s.known.searchPathShown = nil, ""
		s.forgetOwnBuilt()
		s.known.pathProvisional = false
	}
	s.known.dirtyInBlock = false
}

// expectedCharacteristics is what the proxy expects the current fresh
// transaction's characteristics to be: those its BEGIN named, the rest
// the session's defaults. ok is false when it cannot tell (a statement
// ran in the transaction before its first read, or the defaults are not
// known), and the pin asks first.
func (s *Session) expectedCharacteristics() (txnCharacteristics, bool) {
	if s.txn.begin == nil || !s.known.defaults.known || s.known.dirtyInBlock {
		return txnCharacteristics{}, false
	}
	c := s.known.defaults
	if level := s.txn.begin.Isolation; level != "" {
		if !isPostgresLevel(level) {
			return txnCharacteristics{}, false
		}
		c.isolation = level
	}
	if ro := s.txn.begin.ReadOnly; ro != nil {
		c.readOnly = *ro
	}
	return c, true
}

// learnDefaults keeps a plain BEGIN's transaction characteristics as the
// session's defaults.
func (s *Session) learnDefaults(shown txnCharacteristics) {
	if b := s.txn.begin; b != nil && b.Isolation == "" && b.ReadOnly == nil && !s.known.dirtyInBlock {
		s.known.defaults = shown
	}
}

// isPostgresLevel reports whether level is one of PostgreSQL's isolation
// levels (BEGIN may also name Materialize's strict serializable, which the
// backend refuses).
func isPostgresLevel(level string) bool {
	switch level {
	case "read uncommitted", "read committed", "repeatable read", serializable:
		return true
	}
	return false
}

// snapshotIsolation reports whether a transaction at level keeps one
// snapshot for all its statements.
func snapshotIsolation(level string) bool {
	return level == "repeatable read" || level == serializable
}

// beginOptions returns the characteristics a BEGIN names, nil when sql is
// not one BEGIN or START TRANSACTION.
func beginOptions(p *planner.Planner, sql string) *planner.TxnOptions {
	stmts, err := p.Plan(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 || stmts[0].Kind != planner.KindTransaction || stmts[0].Txn.Kind != planner.TxnBegin {
		return nil
	}
	opts := stmts[0].Txn.Options
	return &opts
}
