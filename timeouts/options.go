package timeouts

import (
	"math"
	"strconv"
	"strings"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Option is one run-time setting named in a StartupMessage's options.
type Option struct {
	Name, Value string
}

// ParseStartupOptions splits the options parameter of a StartupMessage as
// PostgreSQL does (pg_split_opts, then process_postgres_switches) and returns
// every setting it names, in order; a later one wins over an earlier one.
//
// Words are separated by spaces; a backslash makes the next character
// literal, so "-c search_path=a\ b" keeps its space. Accepted switches:
// "-c name=value", "-cname=value", "--name=value" (dashes in the name become
// underscores, as in PostgreSQL), and the old short switches that stand for
// a setting (-B -d -e -F -f -h -i -k -l -N -O -P -p -S -s -t -W), translated
// to the settings PostgreSQL gives them. Switches PostgreSQL ignores from a
// client (-b -C -D -E -j -n -r -T -v) are dropped. Names are returned as the
// client spelled them; whether a name exists is for the caller (or the
// backend) to decide.
//
// Errors are FATAL with SQLSTATE 42601 and PostgreSQL's text.
func ParseStartupOptions(options string) ([]Option, error) {
	args := splitOptions(options)
	var out []Option
	add := func(name, value string) { out = append(out, Option{name, value}) }
	var stray []string // non-switch words; glibc getopt moves them to the end
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			stray = append(stray, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			stray = append(stray, arg)
			continue
		}
		// One word may hold several switches ("-Fe"); a switch that takes
		// an argument uses the rest of the word or else the next word.
		for j := 1; j < len(arg); j++ {
			sw := arg[j]
			takesArg, known := switchArgs[sw]
			if !known {
				return nil, invalidArgument(arg)
			}
			var val string
			word := arg // what PostgreSQL names in an error: the last word read
			if takesArg {
				switch {
				case j+1 < len(arg):
					val = arg[j+1:]
				case i+1 < len(args):
					i++
					val, word = args[i], args[i]
				default:
					return nil, invalidArgument(arg)
				}
				j = len(arg)
			}
			if sw == 'c' || sw == '-' {
				name, value, ok := strings.Cut(val, "=")
				if !ok {
					prefix := "-c "
					if sw == '-' {
						prefix = "--"
					}
					return nil, pgerr.Fatal(pgerr.SyntaxError, "%s%s requires a value", prefix, val)
				}
				add(strings.ReplaceAll(name, "-", "_"), value)
				continue
			}
			if !applySwitch(sw, val, add) {
				return nil, invalidArgument(word)
			}
		}
	}
	if len(stray) > 0 {
		return nil, invalidArgument(stray[0])
	}
	return out, nil
}

func invalidArgument(arg string) *pgerr.Error {
	return pgerr.Fatal(pgerr.SyntaxError, "invalid command-line argument for server process: %s", arg).
		WithHint(`Try "postgres --help" for more information.`)
}

// splitOptions is pg_split_opts.
func splitOptions(s string) []string {
	var args []string
	var b strings.Builder
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		b.Reset()
		escaped := false
		for ; i < len(s); i++ {
			c := s[i]
			if isSpace(c) && !escaped {
				break
			}
			if !escaped && c == '\\' {
				escaped = true
			} else {
				escaped = false
				b.WriteByte(c)
			}
		}
		args = append(args, b.String())
	}
	return args
}

// switchArgs is PostgreSQL's getopt string
// "B:bc:C:D:d:EeFf:h:ijk:lN:nOPp:r:S:sTt:v:W:-:": whether each switch takes
// an argument.
var switchArgs = map[byte]bool{
	'B': true, 'b': false, 'c': true, 'C': true, 'D': true, 'd': true,
	'E': false, 'e': false, 'F': false, 'f': true, 'h': true, 'i': false,
	'j': false, 'k': true, 'l': false, 'N': true, 'n': false, 'O': false,
	'P': false, 'p': true, 'r': true, 'S': true, 's': false, 'T': false,
	't': true, 'v': true, 'W': true, '-': true,
}

// applySwitch translates one switch other than -c and -- as process_postgres_switches does for
// a client (not "secure") caller. It reports false where PostgreSQL counts
// an error.
func applySwitch(sw byte, val string, add func(name, value string)) bool {
	switch sw {
	case 'B':
		add("shared_buffers", val)
	case 'd':
		addDebugOptions(atoi(val), add)
	case 'e':
		add("datestyle", "euro")
	case 'F':
		add("fsync", "false")
	case 'f':
		name, ok := planSwitches[firstByte(val)]
		if !ok {
			return false
		}
		add(name, "false")
	case 'h':
		add("listen_addresses", val)
	case 'i':
		add("listen_addresses", "*")
	case 'k':
		add("unix_socket_directories", val)
	case 'l':
		add("ssl", "true")
	case 'N':
		add("max_connections", val)
	case 'O':
		add("allow_system_table_mods", "true")
	case 'P':
		add("ignore_system_indexes", "true")
	case 'p':
		add("port", val)
	case 'S':
		add("work_mem", val)
	case 's':
		add("log_statement_stats", "true")
	case 't':
		var name string
		switch {
		case strings.HasPrefix(val, "pa"):
			name = "log_parser_stats"
		case strings.HasPrefix(val, "pl"):
			name = "log_planner_stats"
		case strings.HasPrefix(val, "e"):
			name = "log_executor_stats"
		default:
			return false
		}
		add(name, "true")
	case 'W':
		add("post_auth_delay", val)
	}
	// Everything else (-b -C -D -E -j -n -r -T -v) is ignored for a client.
	return true
}

var planSwitches = map[byte]string{
	's': "enable_seqscan", 'i': "enable_indexscan", 'o': "enable_indexonlyscan",
	'b': "enable_bitmapscan", 't': "enable_tidscan", 'n': "enable_nestloop",
	'm': "enable_mergejoin", 'h': "enable_hashjoin",
}

func firstByte(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}

// addDebugOptions is set_debug_options for a backend (not postmaster).
func addDebugOptions(level int, add func(name, value string)) {
	if level > 0 {
		add("log_min_messages", "debug"+strconv.Itoa(level))
	} else {
		add("log_min_messages", "notice")
	}
	if level >= 2 {
		add("log_statement", "all")
	}
	if level >= 3 {
		add("debug_print_parse", "true")
	}
	if level >= 4 {
		add("debug_print_plan", "true")
	}
	if level >= 5 {
		add("debug_print_rewritten", "true")
	}
}

// atoi is C atoi: leading spaces, a sign, digits; anything after is ignored.
func atoi(s string) int {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	v := 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9' && v < math.MaxInt32; i++ {
		v = v*10 + int(s[i]-'0')
	}
	if neg {
		return -v
	}
	return v
}
