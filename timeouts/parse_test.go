package timeouts

import (
	"strings"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
)

const unitsHint = `Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".`

// parseCases were each run against PostgreSQL 15 as
// SET statement_timeout = '<in>'; SHOW statement_timeout
// and record what the server answered: SHOW's text, or the error's
// message and hint (all errors were SQLSTATE 22023).
var parseCases = []struct {
	in, show, msg, hint string
}{
	{"5000", "5s", "", ""},
	{"5s", "5s", "", ""},
	{"100ms", "100ms", "", ""},
	{"1min", "1min", "", ""},
	{"2h", "2h", "", ""},
	{"1d", "1d", "", ""},
	{"500us", "0", "", ""},
	{"1.5s", "1500ms", "", ""},
	{"  5s  ", "5s", "", ""},
	{" 5 s", "5s", "", ""},
	{"0", "0", "", ""},
	{"-1", "", `-1 ms is outside the valid range for parameter "statement_timeout" (0 .. 2147483647)`, ""},
	{"abc", "", `invalid value for parameter "statement_timeout": "abc"`, ""},
	{"5S", "", `invalid value for parameter "statement_timeout": "5S"`, unitsHint},
	{"5 MS", "", `invalid value for parameter "statement_timeout": "5 MS"`, unitsHint},
	{"5Ms", "", `invalid value for parameter "statement_timeout": "5Ms"`, unitsHint},
	{"1500", "1500ms", "", ""},
	{"60000", "1min", "", ""},
	{"3600000", "1h", "", ""},
	{"86400000", "1d", "", ""},
	{"1.5", "2ms", "", ""},
	{"0.5", "0", "", ""},
	{"0.4", "0", "", ""},
	{"0.5ms", "0", "", ""},
	{"0.4ms", "0", "", ""},
	{"499us", "0", "", ""},
	{"1500us", "2ms", "", ""},
	{"2500us", "2ms", "", ""},
	{"-0.5", "0", "", ""},
	{"-0.4", "0", "", ""},
	{"2147483647", "2147483647ms", "", ""},
	{"2147483648", "", `invalid value for parameter "statement_timeout": "2147483648"`, "Value exceeds integer range."},
	{"25d", "", `invalid value for parameter "statement_timeout": "25d"`, "Value exceeds integer range."},
	{"24d", "24d", "", ""},
	{"1e3", "1s", "", ""},
	{"1e3ms", "1s", "", ""},
	{"1e10", "", `invalid value for parameter "statement_timeout": "1e10"`, "Value exceeds integer range."},
	{"", "", `invalid value for parameter "statement_timeout": ""`, ""},
	{"5s ", "5s", "", ""},
	{"0x10", "16ms", "", ""},
	{"010", "8ms", "", ""},
	{"+5", "5ms", "", ""},
	{"inf", "", `invalid value for parameter "statement_timeout": "inf"`, ""},
	{"nan", "", `invalid value for parameter "statement_timeout": "nan"`, ""},
	{"5 min", "5min", "", ""},
	{"5mins", "", `invalid value for parameter "statement_timeout": "5mins"`, unitsHint},
	{"5m", "", `invalid value for parameter "statement_timeout": "5m"`, unitsHint},
	{"5sec", "", `invalid value for parameter "statement_timeout": "5sec"`, unitsHint},
	{"1h30min", "", `invalid value for parameter "statement_timeout": "1h30min"`, unitsHint},
	{"1.9999999s", "2s", "", ""},
	{"0.0001s", "0", "", ""},
	{".5s", "500ms", "", ""},
	{"5.s", "5s", "", ""},
	{"1e-3s", "1ms", "", ""},
	{"1E3", "1s", "", ""},
	{"0005", "5ms", "", ""},
	{"  ", "", `invalid value for parameter "statement_timeout": "  "`, ""},
	{"120000", "2min", "", ""},
	{"7200000", "2h", "", ""},
	{"90000", "90s", "", ""},
	{"1001", "1001ms", "", ""},
	{"61000", "61s", "", ""},
	{"60001", "60001ms", "", ""},
	{"3600001", "3600001ms", "", ""},
	{"0x1.8", "2ms", "", ""},
	{"0x1.8p1", "3ms", "", ""},
	{"010.5", "10ms", "", ""},
	{"08", "", `invalid value for parameter "statement_timeout": "08"`, unitsHint},
	{"1e400", "", `invalid value for parameter "statement_timeout": "1e400"`, ""},
	{"1e-400", "", `invalid value for parameter "statement_timeout": "1e-400"`, ""},
	{"1e-310", "", `invalid value for parameter "statement_timeout": "1e-310"`, ""},
	{"99999999999999999999", "", `invalid value for parameter "statement_timeout": "99999999999999999999"`, "Value exceeds integer range."},
	{"0x", "", `invalid value for parameter "statement_timeout": "0x"`, unitsHint},
	{"1.5min", "90s", "", ""},
	{"1.0001min", "1min", "", ""},
	{"1.5d", "36h", "", ""},
	{"1.01d", "1d", "", ""},
	{"0.5us", "0", "", ""},
	{"1500.5us", "2ms", "", ""},
	{"2147483647.4", "2147483647ms", "", ""},
	{"2147483647.5", "", `invalid value for parameter "statement_timeout": "2147483647.5"`, "Value exceeds integer range."},
	{"-2147483648", "", `-2147483648 ms is outside the valid range for parameter "statement_timeout" (0 .. 2147483647)`, ""},
	{"-2147483649", "", `invalid value for parameter "statement_timeout": "-2147483649"`, "Value exceeds integer range."},
	{"5\ts", "5s", "", ""},
	{"1e", "", `invalid value for parameter "statement_timeout": "1e"`, unitsHint},
	{"1e+", "", `invalid value for parameter "statement_timeout": "1e+"`, unitsHint},
	{"1.e3", "1s", "", ""},
	{"5 msx", "", `invalid value for parameter "statement_timeout": "5 msx"`, unitsHint},
	{"5 ms x", "", `invalid value for parameter "statement_timeout": "5 ms x"`, unitsHint},
	{"1 d", "1d", "", ""},
	{".", "", `invalid value for parameter "statement_timeout": "."`, ""},
	{"-", "", `invalid value for parameter "statement_timeout": "-"`, ""},
	{"+", "", `invalid value for parameter "statement_timeout": "+"`, ""},
	{"1ms1", "", `invalid value for parameter "statement_timeout": "1ms1"`, unitsHint},
	{"\t7s\n", "7s", "", ""},
	{"1.0005ms", "1ms", "", ""},
	{"1.0015ms", "1ms", "", ""},
	{"0.0005s", "0", "", ""},
	{"0xFFFFFFFFFFFFFFFFFF", "", `invalid value for parameter "statement_timeout": "0xFFFFFFFFFFFFFFFFFF"`, "Value exceeds integer range."},
	{"-0", "0", "", ""},
	{"1e2h", "100h", "", ""},
	{"2.5", "2ms", "", ""},
	{"3.5", "4ms", "", ""},
	{"-1.5", "", `-2 ms is outside the valid range for parameter "statement_timeout" (0 .. 2147483647)`, ""},
	{"1 h", "1h", "", ""},
	{" 0 ", "0", "", ""},
	{"0x7FFFFFFF", "2147483647ms", "", ""},
	{"017777777777", "2147483647ms", "", ""},
	{"5e", "", `invalid value for parameter "statement_timeout": "5e"`, unitsHint},
	{"5 e3", "", `invalid value for parameter "statement_timeout": "5 e3"`, unitsHint},
	{"1.5 h", "90min", "", ""},
	{"1.5 min", "90s", "", ""},
	{"0.001", "0", "", ""},
	{"0.1 us", "0", "", ""},
	{"2147483.647s", "2147483647ms", "", ""},
	{"2147483.6475s", "", `invalid value for parameter "statement_timeout": "2147483.6475s"`, "Value exceeds integer range."},
	{"35791min", "35791min", "", ""},
	{"35792min", "", `invalid value for parameter "statement_timeout": "35792min"`, "Value exceeds integer range."},
	{"596h", "596h", "", ""},
	{"597h", "", `invalid value for parameter "statement_timeout": "597h"`, "Value exceeds integer range."},
	{"-.5s", "", `invalid value for parameter "statement_timeout": "-.5s"`, ""},
	{" .5s", "", `invalid value for parameter "statement_timeout": " .5s"`, ""},
	{"+.5", "", `invalid value for parameter "statement_timeout": "+.5"`, ""},
	{".5", "0", "", ""},
	{"-.5", "", `invalid value for parameter "statement_timeout": "-.5"`, ""},
	{" 1.5", "2ms", "", ""},
	{"1e3 s", "1000s", "", ""},
	{"0e5", "0", "", ""},
	{"0.0e-400", "0", "", ""},
	{"-0x10", "", `-16 ms is outside the valid range for parameter "statement_timeout" (0 .. 2147483647)`, ""},
	{"0X1F", "31ms", "", ""},
	{"  -  5", "", `invalid value for parameter "statement_timeout": "  -  5"`, ""},
	{"- 5", "", `invalid value for parameter "statement_timeout": "- 5"`, ""},
}

func TestParseAgainstPostgres(t *testing.T) {
	for _, tc := range parseCases {
		d, err := Parse("statement_timeout", tc.in)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("Parse(%q): unexpected error %v", tc.in, err)
				continue
			}
			if got := Format(d); got != tc.show {
				t.Errorf("Parse(%q) = %v, SHOW %q; PostgreSQL shows %q", tc.in, d, got, tc.show)
			}
			continue
		}
		e, ok := err.(*pgerr.Error)
		if !ok {
			t.Errorf("Parse(%q) = %v, %v; want *pgerr.Error %q", tc.in, d, err, tc.msg)
			continue
		}
		if e.Code != pgerr.InvalidParameterValue || e.Severity != pgerr.SeverityError || e.Message != tc.msg || e.Hint != tc.hint {
			t.Errorf("Parse(%q) error = %s %s %q hint %q\nPostgreSQL: 22023 ERROR %q hint %q",
				tc.in, e.Code, e.Severity, e.Message, e.Hint, tc.msg, tc.hint)
		}
	}
}

// The other three settings share statement_timeout's rules; their name
// shows in the messages (checked against PostgreSQL 15 as well).
func TestParseNames(t *testing.T) {
	for _, tc := range []struct{ name, in, msg, hint string }{
		{"lock_timeout", "abc", `invalid value for parameter "lock_timeout": "abc"`, ""},
		{"idle_session_timeout", "-5", `-5 ms is outside the valid range for parameter "idle_session_timeout" (0 .. 2147483647)`, ""},
		{"idle_in_transaction_session_timeout", "5x", `invalid value for parameter "idle_in_transaction_session_timeout": "5x"`, unitsHint},
		{"Statement_Timeout", "abc", `invalid value for parameter "Statement_Timeout": "abc"`, ""},
	} {
		_, err := Parse(tc.name, tc.in)
		e, ok := err.(*pgerr.Error)
		if !ok || e.Code != pgerr.InvalidParameterValue || e.Message != tc.msg || e.Hint != tc.hint {
			t.Errorf("Parse(%q, %q) = %v; want %q hint %q", tc.name, tc.in, err, tc.msg, tc.hint)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0"},
		{time.Millisecond, "1ms"},
		{1500 * time.Millisecond, "1500ms"},
		{time.Second, "1s"},
		{90 * time.Second, "90s"},
		{time.Minute, "1min"},
		{90 * time.Minute, "90min"},
		{time.Hour, "1h"},
		{36 * time.Hour, "36h"},
		{24 * time.Hour, "1d"},
		{24 * 24 * time.Hour, "24d"},
		{maxMillis * time.Millisecond, "2147483647ms"},
		{1500 * time.Microsecond, "1ms"}, // below a millisecond is dropped
		{-time.Second, "-1000"},          // never a setting's value; no unit, as PostgreSQL
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLookupParam(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Param
		ok   bool
	}{
		{"statement_timeout", StatementTimeout, true},
		{"STATEMENT_TIMEOUT", StatementTimeout, true},
		{"lock_timeout", LockTimeout, true},
		{"idle_in_transaction_session_timeout", IdleInTransactionSessionTimeout, true},
		{"Idle_Session_Timeout", IdleSessionTimeout, true},
		{"statement-timeout", 0, false},
		{"", 0, false},
	} {
		got, ok := LookupParam(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LookupParam(%q) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok && got.String() != strings.ToLower(tc.name) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if s := Param(99).String(); s != "Param(99)" {
		t.Errorf("Param(99).String() = %q", s)
	}
}

// FuzzParse checks that Parse never panics, that what it accepts is in
// range and whole milliseconds, and that SHOW's text parses back to it.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse("statement_timeout", s)
		if err != nil {
			if pgerr.Of(err) != pgerr.InvalidParameterValue {
				t.Fatalf("Parse(%q): error %v with code %s", s, err, pgerr.Of(err))
			}
			return
		}
		if d < 0 || d > maxMillis*time.Millisecond || d%time.Millisecond != 0 {
			t.Fatalf("Parse(%q) = %v: out of range or not whole milliseconds", s, d)
		}
		back, err := Parse("statement_timeout", Format(d))
		if err != nil || back != d {
			t.Fatalf("Parse(Format(%v)) = %v, %v", d, back, err)
		}
	})
}
