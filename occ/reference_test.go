package occ

// The reference semantics of payloads (consolidation, multisets, the
// single-table refold) that the replays, the randomized tests and the
// simulated store check the loop against. Production code appends the
// proxy's statement as it is and needs none of it.

import (
	"fmt"
)

// Consolidate sums the diffs of updates per key and drops the rows whose
// sum is zero. The result keeps the order in which keys first appear, and
// the first Row seen for each key, so it is deterministic. ups is not
// modified.
func Consolidate[R any, K comparable](ups []Update[R], key func(R) K) []Update[R] {
	if len(ups) == 0 {
		return nil
	}
	idx := make(map[K]int, len(ups))
	out := make([]Update[R], 0, len(ups))
	for _, u := range ups {
		k := key(u.Row)
		if i, ok := idx[k]; ok {
			out[i].Diff += u.Diff
			continue
		}
		idx[k] = len(out)
		out = append(out, u)
	}
	n := 0
	for _, u := range out {
		if u.Diff != 0 {
			out[n] = u
			n++
		}
	}
	clear(out[n:])
	if n == 0 {
		return nil
	}
	return out[:n]
}

// Negate returns ups with every diff negated.
func Negate[R any](ups []Update[R]) []Update[R] {
	out := make([]Update[R], len(ups))
	for i, u := range ups {
		out[i] = Update[R]{Row: u.Row, Diff: -u.Diff}
	}
	return out
}

// Diff returns the consolidated updates that turn the multiset before into
// after: what a re-read contributes when a refold is not possible.
func Diff[R any, K comparable](before, after []Update[R], key func(R) K) []Update[R] {
	all := make([]Update[R], 0, len(before)+len(after))
	all = append(all, Negate(before)...)
	all = append(all, after...)
	return Consolidate(all, key)
}

// OverDeleteError reports a retraction of more copies of a row than the
// collection holds. Under multiset semantics duplicates are distinct units,
// so this is never clamped: it means the payload was computed against a
// state that is not the one it is applied to, a bug the loop reports
// rather than hides.
type OverDeleteError struct {
	Row     string // the row, as %v prints it
	Have    int64  // copies present
	Retract int64  // copies the update retracts
}

func (e *OverDeleteError) Error() string {
	return fmt.Sprintf("occ: retraction of %d copies of row %s, only %d present", e.Retract, e.Row, e.Have)
}

// Multiset is a collection of rows with multiplicities, keyed by K: the
// reference semantics of applying payloads, used by the proxy's tests and
// by this package's simulated store. Not safe for concurrent use.
type Multiset[R any, K comparable] struct {
	key   func(R) K
	count map[K]int64
	row   map[K]R
	order []K // first insertion order, for deterministic listing
}

// NewMultiset returns an empty multiset whose rows are identified by key.
func NewMultiset[R any, K comparable](key func(R) K) *Multiset[R, K] {
	return &Multiset[R, K]{key: key, count: map[K]int64{}, row: map[K]R{}}
}

// Count returns the multiplicity of r.
func (m *Multiset[R, K]) Count(r R) int64 { return m.count[m.key(r)] }

// Len returns the number of rows, duplicates counted.
func (m *Multiset[R, K]) Len() int64 {
	var n int64
	for _, c := range m.count {
		n += c
	}
	return n
}

// Check reports the first over-delete that applying ups would cause, or
// nil. ups need not be consolidated: the check is on their per-key sum.
func (m *Multiset[R, K]) Check(ups []Update[R]) error {
	for _, u := range Consolidate(ups, m.key) {
		if have := m.count[m.key(u.Row)]; have+u.Diff < 0 {
			return &OverDeleteError{Row: fmt.Sprint(u.Row), Have: have, Retract: -u.Diff}
		}
	}
	return nil
}

// Apply applies ups atomically: either all of them, or none and an
// *OverDeleteError.
func (m *Multiset[R, K]) Apply(ups []Update[R]) error {
	if err := m.Check(ups); err != nil {
		return err
	}
	for _, u := range ups {
		k := m.key(u.Row)
		c, seen := m.count[k]
		if !seen {
			if _, known := m.row[k]; !known {
				m.order = append(m.order, k)
			}
		}
		m.row[k] = u.Row
		if c+u.Diff == 0 {
			delete(m.count, k)
		} else {
			m.count[k] = c + u.Diff
		}
	}
	return nil
}

// Updates returns the contents as insertions, in first-insertion order.
func (m *Multiset[R, K]) Updates() []Update[R] {
	var out []Update[R]
	for _, k := range m.order {
		if c := m.count[k]; c != 0 {
			out = append(out, Update[R]{Row: m.row[k], Diff: c})
		}
	}
	return out
}

// Clone returns an independent copy of m.
func (m *Multiset[R, K]) Clone() *Multiset[R, K] {
	c := NewMultiset[R, K](m.key)
	for k, v := range m.count {
		c.count[k] = v
	}
	for k, v := range m.row {
		c.row[k] = v
	}
	c.order = append([]K(nil), m.order...)
	return c
}

// String prints the rows as {row×n, ...} in first-insertion order.
func (m *Multiset[R, K]) String() string { return FormatUpdates(m.Updates()) }

// Fold is the refold of a single-table selection, for Selection.Refold
// implementations: a statement whose effect on each row depends on that
// row only (UPDATE ... SET/WHERE over one table, DELETE ... WHERE) is
// linear in its input, so its payload against the state at to-1 is its
// payload against the state at from-1 plus its effect on the versions that
// changed in [from, to) (a version inserted in the window with +1, one
// retracted with -1). contrib returns the effect of n copies of row r (n
// may be negative) and the rows counted for them.
func Fold[R any, K comparable](p Payload[R], changes []Update[R], contrib func(r R, n int64) ([]Update[R], int64), key func(R) K) Payload[R] {
	all := append([]Update[R](nil), p.Updates...)
	rows := p.Rows
	for _, c := range changes {
		u, n := contrib(c.Row, c.Diff)
		all = append(all, u...)
		rows += n
	}
	return Payload[R]{Updates: Consolidate(all, key), Rows: rows}
}
