package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestKeepFirstValue: the first column of a DataRow read in place, as
// pgproto3 decodes it ("" for NULL); a row without columns, or whose
// first column is cut short, leaves the value alone.
func TestKeepFirstValue(t *testing.T) {
	for _, c := range []struct {
		values [][]byte
		want   string
	}{
		{[][]byte{[]byte("1700000000000|7")}, "1700000000000|7"},
		{[][]byte{[]byte("a"), []byte("b")}, "a"},
		{[][]byte{nil}, ""},
		{[][]byte{{}}, ""},
		{nil, "unchanged"},
	} {
		frame, err := (&pgproto3.DataRow{Values: c.values}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		v := "unchanged"
		keepFirstValue(frame, &v)
		if v != c.want {
			t.Errorf("%q: %q, want %q", c.values, v, c.want)
		}
		if len(c.values) == 1 && len(c.values[0]) > 0 {
			cut := "unchanged"
			keepFirstValue(frame[:len(frame)-1], &cut)
			if cut != "unchanged" {
				t.Errorf("%q cut short: %q, want it left alone", c.values, cut)
			}
		}
	}
}
