package timeouts

import (
	"reflect"
	"testing"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Each case was sent to PostgreSQL 15 as PGOPTIONS and the settings it
// applied read back from pg_settings (source 'client'), or its FATAL error
// recorded. Where PostgreSQL rejects a setting's value or name, that is the
// caller's check, not the parser's: the case lists the pairs the parser
// returns and the comment says what the server then reported.
func TestParseStartupOptions(t *testing.T) {
	const hint = `Try "postgres --help" for more information.`
	type o = Option
	for _, tc := range []struct {
		in   string
		want []Option
		msg  string // FATAL 42601 message
		hint string
	}{
		{in: "", want: nil},
		{in: "   ", want: nil},
		{in: "-c statement_timeout=5s", want: []o{{"statement_timeout", "5s"}}},
		{in: "-cstatement_timeout=5s", want: []o{{"statement_timeout", "5s"}}},
		{in: "--statement-timeout=5s", want: []o{{"statement_timeout", "5s"}}},
		{in: " -c   lock_timeout=3s   ", want: []o{{"lock_timeout", "3s"}}},
		{in: `-c search_path=a\ b`, want: []o{{"search_path", "a b"}}}, // server: list syntax is invalid
		{in: `-c search_path=a\\b`, want: []o{{"search_path", `a\b`}}},
		{in: `-c statement_timeout=5s\`, want: []o{{"statement_timeout", "5s"}}},
		{in: "-c Statement_Timeout=7s", want: []o{{"Statement_Timeout", "7s"}}},
		{in: "-c statement_timeout=1s=2", want: []o{{"statement_timeout", "1s=2"}}}, // server: invalid value
		{in: "-c =5", want: []o{{"", "5"}}},                                         // server: unrecognized ""
		{in: "-c work_mem=1MB -S 2000", want: []o{{"work_mem", "1MB"}, {"work_mem", "2000"}}},
		{in: "-Fe", want: []o{{"fsync", "false"}, {"datestyle", "euro"}}}, // server: fsync cannot be changed now
		{in: "-e", want: []o{{"datestyle", "euro"}}},
		{in: "-f s", want: []o{{"enable_seqscan", "false"}}},
		{in: "-fs", want: []o{{"enable_seqscan", "false"}}},
		{in: "-t pa", want: []o{{"log_parser_stats", "true"}}},
		{in: "-t pl", want: []o{{"log_planner_stats", "true"}}},
		{in: "-t e", want: []o{{"log_executor_stats", "true"}}},
		{in: "-d 0", want: []o{{"log_min_messages", "notice"}}},
		{in: "-d 3", want: []o{{"log_min_messages", "debug3"}, {"log_statement", "all"}, {"debug_print_parse", "true"}}},
		{in: "-n -T -C foo", want: nil},
		{in: "-c statement_timeout", msg: "-c statement_timeout requires a value"},
		{in: "--statement_timeout", msg: "--statement_timeout requires a value"},
		{in: "-c", msg: "invalid command-line argument for server process: -c", hint: hint},
		{in: "-x", msg: "invalid command-line argument for server process: -x", hint: hint},
		{in: "stray", msg: "invalid command-line argument for server process: stray", hint: hint},
		{in: "-c statement_timeout=1s stray -c lock_timeout=2s", msg: "invalid command-line argument for server process: stray", hint: hint},
		{in: "-- statement_timeout=1s", msg: "invalid command-line argument for server process: statement_timeout=1s", hint: hint},
		{in: "-f x", msg: "invalid command-line argument for server process: x", hint: hint},
		{in: "-t x", msg: "invalid command-line argument for server process: x", hint: hint},
	} {
		got, err := ParseStartupOptions(tc.in)
		if tc.msg == "" {
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseStartupOptions(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		e, ok := err.(*pgerr.Error)
		if !ok || e.Code != pgerr.SyntaxError || !e.IsFatal() || e.Message != tc.msg || e.Hint != tc.hint {
			t.Errorf("ParseStartupOptions(%q) = %q, %#v; want FATAL 42601 %q hint %q", tc.in, got, err, tc.msg, tc.hint)
		}
	}
}

func FuzzParseStartupOptions(f *testing.F) {
	for _, s := range []string{"-c a=b", `--x-y=1\ 2`, "-Fe -d 5", "-c", "-- x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		opts, err := ParseStartupOptions(s)
		if err != nil && opts != nil {
			t.Fatalf("options and error both returned for %q", s)
		}
	})
}
