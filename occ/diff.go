package occ

import (
	"fmt"
	"strings"
)

// Update is one row with a multiplicity change: Diff > 0 inserts Diff
// copies of Row, Diff < 0 retracts -Diff copies. R is whatever the proxy
// needs to write the row (its wire text, say); its identity is given by a
// key function wherever identity matters.
type Update[R any] struct {
	Row  R
	Diff int64
}

// Payload is what a write commits at its timestamp: consolidated updates
// plus the row count the client is told ("UPDATE n"). The count is carried
// separately because it is not a function of the diffs: an UPDATE that
// sets a column to its own value affects n rows and consolidates to nothing.
type Payload[R any] struct {
	Updates []Update[R]
	Rows    int64
}

// Empty reports whether p changes no row.
func (p Payload[R]) Empty() bool { return len(p.Updates) == 0 }

// FormatUpdates prints updates as {+a, -b×2}; used by tests and logs.
func FormatUpdates[R any](ups []Update[R]) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, u := range ups {
		if i > 0 {
			b.WriteString(", ")
		}
		if u.Diff < 0 {
			b.WriteByte('-')
		} else {
			b.WriteByte('+')
		}
		fmt.Fprint(&b, u.Row)
		if d := abs(u.Diff); d != 1 {
			fmt.Fprintf(&b, "×%d", d)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
