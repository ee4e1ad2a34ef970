package timeouts

import (
	"testing"

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
