package occ

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// simStore is an in-memory store with a shared upper and an oracle: what
// the proxy's backend is to the loop, small enough to check against a
// serial model. Rows are strings "<table>:<value>" (c: counters, d: rows
// with duplicates, l: a log of counts).
type simStore struct {
	base    *Multiset[string, string] // the state at time 0
	cur     *Multiset[string, string] // the state at upper-1
	upper   uint64                    // times < upper are final
	log     []simCommit               // in time order
	readTS  uint64
	writeTS uint64
	bumps   []uint64 // scripted oracle answers, consumed first (replays)
}

type simCommit struct {
	t      uint64
	writer string
	ups    []Update[string]
	rows   int64
}

func newSimStore(rows ...string) *simStore {
	s := &simStore{base: NewMultiset[string](id), upper: 1}
	for _, r := range rows {
		_ = s.base.Apply(ups(r, 1))
	}
	s.cur = s.base.Clone()
	return s
}

func (s *simStore) stateAt(at uint64) *Multiset[string, string] {
	m := s.base.Clone()
	for _, c := range s.log {
		if c.t <= at {
			if err := m.Apply(c.ups); err != nil {
				panic(err)
			}
		}
	}
	return m
}

// finalize makes time at final: the upper moves past it (an empty append,
// as the txns upper advances with time), so no later commit lands at or
// below it.
func (s *simStore) finalize(at uint64) {
	if s.upper <= at {
		s.upper = at + 1
	}
}

func (s *simStore) changes(from, to uint64) []Update[string] {
	s.finalize(to - 1)
	var out []Update[string]
	for _, c := range s.log {
		if c.t >= from && c.t < to {
			out = append(out, c.ups...)
		}
	}
	return out
}

func (s *simStore) oracleWriteTS() uint64 {
	if len(s.bumps) > 0 {
		ts := s.bumps[0]
		s.bumps = s.bumps[1:]
		return ts
	}
	s.writeTS = max(s.writeTS+1, s.upper)
	return s.writeTS
}

func (s *simStore) applyWrite(t uint64) { s.readTS = max(s.readTS, t) }

func (s *simStore) append(writer string, t uint64, p Payload[string]) (AppendResult, error) {
	if s.upper > t {
		return AppendResult{ActualUpper: s.upper}, nil
	}
	if err := s.cur.Apply(p.Updates); err != nil {
		return AppendResult{}, err
	}
	s.log = append(s.log, simCommit{t: t, writer: writer, ups: p.Updates, rows: p.Rows})
	s.upper = t + 1
	return AppendResult{OK: true}, nil
}

func (s *simStore) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "upper=%d read_ts=%d state=%s\n", s.upper, s.readTS, s.cur)
	for _, c := range s.log {
		fmt.Fprintf(&b, "  T=%d %s %s rows=%d\n", c.t, c.writer, FormatUpdates(c.ups), c.rows)
	}
	return b.String()
}

// simSel is a statement of the simulation. Linear statements (an UPDATE or
// DELETE over one table: each row's contribution depends on that row only)
// refold from the window's changes, as the proxy does for single-table
// selections; the others re-read.
type simSel struct {
	name  string
	blind Payload[string] // for blind writes
	// contrib is a linear statement's contribution of n copies of row r.
	contrib func(r string, n int64) (ups []Update[string], rows int64)
	// eval is a non-linear statement's payload against a whole state.
	eval func(m *Multiset[string, string]) Payload[string]
}

var simSels = map[string]simSel{
	// UPDATE c SET v = v + 1
	"inc": {name: "inc", contrib: func(r string, n int64) ([]Update[string], int64) {
		v, ok := strings.CutPrefix(r, "c:")
		if !ok {
			return nil, 0
		}
		i, _ := strconv.Atoi(v)
		return ups(r, int(-n), "c:"+strconv.Itoa(i+1), int(n)), n
	}},
	// DELETE FROM d WHERE v = 'x'
	"delx": {name: "delx", contrib: func(r string, n int64) ([]Update[string], int64) {
		if r != "d:x" {
			return nil, 0
		}
		return ups(r, int(-n)), n
	}},
	// INSERT INTO l SELECT count(*) FROM d
	"snap": {name: "snap", eval: func(m *Multiset[string, string]) Payload[string] {
		var n int64
		for _, u := range m.Updates() {
			if strings.HasPrefix(u.Row, "d:") {
				n += u.Diff
			}
		}
		return Payload[string]{Updates: ups("l:"+strconv.FormatInt(n, 10), 1), Rows: 1}
	}},
	// INSERT INTO d VALUES ('x')
	"insx": {name: "insx", blind: Payload[string]{Updates: ups("d:x", 1), Rows: 1}},
}

func (sel simSel) isBlind() bool { return sel.contrib == nil && sel.eval == nil }

func (sel simSel) write() Write[string] {
	return Write[string]{Blind: sel.isBlind(), Payload: sel.blind}
}

// payload is the statement's payload against state m: the serial model.
func (sel simSel) payload(m *Multiset[string, string]) Payload[string] {
	switch {
	case sel.isBlind():
		return sel.blind
	case sel.eval != nil:
		return sel.eval(m)
	}
	return sel.fold(Payload[string]{}, m.Updates())
}

func (sel simSel) fold(p Payload[string], changes []Update[string]) Payload[string] {
	return Fold(p, changes, sel.contrib, id)
}

func (sel simSel) read(s *simStore, at uint64) Payload[string] {
	s.finalize(at)
	return sel.payload(s.stateAt(at))
}

func (sel simSel) refold(s *simStore, p Payload[string], from, to uint64) (Payload[string], bool) {
	if sel.contrib == nil {
		return Payload[string]{}, false
	}
	return sel.fold(p, s.changes(from, to)), true
}

// exec performs action a of writer against s and returns the event that
// answers it: the stepwise driver of replays and the quick-check.
func exec(s *simStore, writer string, sel simSel, a Action[string]) Event[string] {
	switch a.Kind {
	case ActAllocate:
		return Event[string]{Kind: EvTimestamp, TS: s.oracleWriteTS()}
	case ActRead:
		return Event[string]{Kind: EvRead, Payload: sel.read(s, a.At)}
	case ActRefold:
		p, ok := sel.refold(s, a.Payload, a.From, a.To)
		return Event[string]{Kind: EvRefolded, Payload: p, OK: ok}
	case ActAppend:
		r, err := s.append(writer, a.T, a.Payload)
		if err != nil {
			return Event[string]{Kind: EvError, Err: err}
		}
		return Event[string]{Kind: EvAppended, Append: r}
	case ActApply:
		s.applyWrite(a.T)
		return Event[string]{Kind: EvApplied}
	}
	panic("exec: terminal action " + a.String())
}

// checkSerial replays the committed writes in timestamp order against a
// serial model: each write's payload recomputed against the model state
// at T-1 must equal what was committed, rows included, and the final
// state must match. sels maps writer to statement.
func checkSerial(s *simStore, sels map[string]simSel) error {
	model := s.base.Clone()
	if !sort.SliceIsSorted(s.log, func(i, j int) bool { return s.log[i].t < s.log[j].t }) {
		return fmt.Errorf("log not in timestamp order")
	}
	for _, c := range s.log {
		sel, ok := sels[c.writer]
		if !ok {
			// An external commit of a script: taken as is.
			if err := model.Apply(c.ups); err != nil {
				return fmt.Errorf("T=%d %s: %v", c.t, c.writer, err)
			}
			continue
		}
		want := sel.payload(model)
		if got, w := sortedUpdates(c.ups), sortedUpdates(want.Updates); got != w || c.rows != want.Rows {
			return fmt.Errorf("T=%d %s committed %s rows=%d, serial model says %s rows=%d", c.t, c.writer, got, c.rows, w, want.Rows)
		}
		if err := model.Apply(want.Updates); err != nil {
			return fmt.Errorf("T=%d %s: serial model: %v", c.t, c.writer, err)
		}
	}
	if got, want := canonical(s.cur), canonical(model); got != want {
		return fmt.Errorf("final state %s, serial model %s", got, want)
	}
	if got, want := canonical(s.cur), canonical(s.stateAt(s.upper)); got != want {
		return fmt.Errorf("current state %s, replayed history %s", got, want)
	}
	return nil
}

// canonical prints a multiset sorted, for comparisons that ignore order.
func canonical(m *Multiset[string, string]) string { return sortedUpdates(m.Updates()) }

// sortedUpdates prints updates consolidated and sorted by row.
func sortedUpdates(ups []Update[string]) string {
	u := Consolidate(ups, id)
	sort.Slice(u, func(i, j int) bool { return u[i].Row < u[j].Row })
	return FormatUpdates(u)
}

// simEnv runs a simStore behind the loop's interfaces, under a lock, for
// the blocking driver (Run).
type simEnv struct {
	mu sync.Mutex
	s  *simStore
}

type simWriter struct {
	env  *simEnv
	name string
	sel  simSel
}

func (e *simEnv) WriteTS(context.Context) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.s.oracleWriteTS(), nil
}

func (e *simEnv) ApplyWrite(_ context.Context, t uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.s.applyWrite(t)
	return nil
}

func (w simWriter) Read(_ context.Context, at uint64) (Payload[string], error) {
	w.env.mu.Lock()
	defer w.env.mu.Unlock()
	return w.sel.read(w.env.s, at), nil
}

func (w simWriter) Refold(_ context.Context, p Payload[string], from, to uint64) (Payload[string], bool, error) {
	w.env.mu.Lock()
	defer w.env.mu.Unlock()
	q, ok := w.sel.refold(w.env.s, p, from, to)
	return q, ok, nil
}

func (w simWriter) Append(_ context.Context, t uint64, p Payload[string]) (AppendResult, error) {
	w.env.mu.Lock()
	defer w.env.mu.Unlock()
	return w.env.s.append(w.name, t, p)
}

func (e *simEnv) runEnv(name string, sel simSel) Env[string] {
	w := simWriter{env: e, name: name, sel: sel}
	return Env[string]{Oracle: e, Selection: w, Appender: w}
}
