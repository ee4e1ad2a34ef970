package slt

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	const text, int4, f8, numeric = 25, 23, 701, 1700
	for _, tc := range []struct {
		typ  byte
		oid  uint32
		in   string
		null bool
		want string
	}{
		{'T', text, "abc", false, "abc"},
		{'T', text, "", false, "(empty)"},
		{'T', text, "", true, "NULL"},
		{'T', text, "a\tb\nc", false, "a@b@c"},
		{'T', text, "é", false, "@@"}, // two UTF-8 bytes
		{'T', text, "~\x7f", false, "~@"},
		{'T', boolOID, "t", false, "1"},
		{'T', boolOID, "f", false, "0"},
		{'T', int4, "-5", false, "-5"},
		{'I', int4, "42", false, "42"},
		{'I', int4, "-42", false, "-42"},
		{'I', int4, "", true, "NULL"},
		{'I', numeric, "2.75", false, "2"},
		{'I', numeric, "-7.9", false, "-7"},
		{'I', numeric, "-0.5", false, "0"},
		{'I', text, "abc", false, "0"},
		{'I', text, "", false, "0"},
		{'I', text, "  12abc", false, "12"},
		{'I', text, "+3", false, "3"},
		{'I', f8, "1e+20", false, "1"},
		{'I', boolOID, "t", false, "1"},
		{'I', boolOID, "f", false, "0"},
		{'I', 20, "4294967297", false, "1"},            // low 32 bits of 2^32+1
		{'I', 20, "2147483648", false, "-2147483648"},  // int wraps
		{'I', 20, "99999999999999999999", false, "-1"}, // strtol saturates to LONG_MAX
		{'I', 20, "-99999999999999999999", false, "0"}, // LONG_MIN's low bits
		{'R', int4, "5", false, "5.000"},
		{'R', f8, "2.25", false, "2.250"},
		{'R', f8, "0.0005", false, "0.001"}, // 0.0005 is just above in binary
		{'R', f8, "0.125", false, "0.125"},
		{'R', f8, "-0.0001", false, "-0.000"},
		{'R', numeric, "1.2345678", false, "1.235"},
		{'R', f8, "1e3", false, "1000.000"},
		{'R', f8, "NaN", false, "nan"},
		{'R', f8, "Infinity", false, "inf"},
		{'R', f8, "-Infinity", false, "-inf"},
		{'R', text, "abc", false, "0.000"},
		{'R', text, "3.5x", false, "3.500"},
		{'R', text, "1e", false, "1.000"},
		{'R', boolOID, "t", false, "1.000"},
		{'R', f8, "", true, "NULL"},
		{'B', boolOID, "t", false, "true"},
		{'B', boolOID, "f", false, "false"},
		{'B', boolOID, "", true, "NULL"},
		{'O', 26, "1234", false, "1234"},
	} {
		got := render(tc.typ, tc.oid, cell{s: tc.in, null: tc.null})
		if got != tc.want {
			t.Errorf("render(%c, %d, %q, null=%v) = %q, want %q", tc.typ, tc.oid, tc.in, tc.null, got, tc.want)
		}
	}
}

func TestAtof(t *testing.T) {
	for in, want := range map[string]float64{
		"1.5": 1.5, " -2": -2, ".5": 0.5, "5.": 5, "1e2x": 100, "1e+": 1, "x": 0, "-": 0, ".": 0,
		"1e400": math.Inf(1), "inf": math.Inf(1), "-INFINITY": math.Inf(-1),
	} {
		if got := atof(in); got != want {
			t.Errorf("atof(%q) = %v, want %v", in, got, want)
		}
	}
	if !math.IsNaN(atof("nan")) {
		t.Error("atof(nan) is not NaN")
	}
}

func TestSortValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ncol int
		mode Sort
		want string
	}{
		{"3 1 2", 1, NoSort, "3 1 2"},
		{"3 1 2", 1, ValueSort, "1 2 3"},
		{"10 9 2", 1, ValueSort, "10 2 9"}, // bytewise, as strcmp
		{"b 1 a 2 a 1", 2, RowSort, "a 1 a 2 b 1"},
		{"b 1 a 2 a 1", 2, ValueSort, "1 1 2 a a b"},
		// Column by column: "1","23" < "12","3" because "1" < "12".
		{"12 3 1 23", 2, RowSort, "1 23 12 3"},
		{"x y z", 2, RowSort, "x y z"}, // not whole rows: left alone
	} {
		vals := strings.Fields(tc.in)
		sortValues(vals, tc.ncol, tc.mode)
		if got := strings.Join(vals, " "); got != tc.want {
			t.Errorf("sortValues(%q, %d, %d) = %q, want %q", tc.in, tc.ncol, tc.mode, got, tc.want)
		}
	}
}

func TestHash(t *testing.T) {
	// md5("1\n10\n2\n20\n3\n30\n"), as the original computes it.
	vals := []string{"1", "10", "2", "20", "3", "30"}
	if got, want := hashLine(len(vals), hashValues(vals)), "6 values hashing to eec09b499a9f85c0bf4b07134d807d7a"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// No values still hashes (md5 of nothing).
	if got := hashValues(nil); got != "d41d8cd98f00b204e9800998ecf8427e" {
		t.Errorf("hash of nothing = %s", got)
	}
	for s, want := range map[string]bool{
		"6 values hashing to eec09b499a9f85c0bf4b07134d807d7a": true,
		"6 values hashing to":    false,
		"values hashing to x y":  false,
		"1":                      false,
		"30 values hashing to x": true,
	} {
		if got := parseHashLine(s); got != want {
			t.Errorf("parseHashLine(%q) = %v", s, got)
		}
	}
}

func TestCockroach(t *testing.T) {
	if got := cockroachSplit("1   a␠b  NULL", 3); !slices.Equal(got, []string{"1", "a b", "NULL"}) {
		t.Errorf("split = %q", got)
	}
	if got := cockroachSplit("  a b  ", 1); !slices.Equal(got, []string{"a b"}) {
		t.Errorf("split one column = %q", got)
	}
	if got := cockroachJoin([]string{"1", "a b"}); got != "1 a␠b" {
		t.Errorf("join = %q", got)
	}
	if got := cockroachExpected([]string{"2 b", "1 a"}, 2, RowSort); !slices.Equal(got, []string{"1", "a", "2", "b"}) {
		t.Errorf("expected rows not sorted: %q", got)
	}
}
