package timeouts

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Param is one of the time-valued settings this package tracks. All four
// are PostgreSQL integer settings in milliseconds, range 0 .. 2147483647,
// where 0 means disabled.
type Param uint8

// The tracked settings.
const (
	StatementTimeout Param = iota
	LockTimeout
	IdleInTransactionSessionTimeout
	IdleSessionTimeout
	numParams
)

var paramNames = [numParams]string{
	StatementTimeout:                "statement_timeout",
	LockTimeout:                     "lock_timeout",
	IdleInTransactionSessionTimeout: "idle_in_transaction_session_timeout",
	IdleSessionTimeout:              "idle_session_timeout",
}

// String returns the setting's PostgreSQL name.
func (p Param) String() string {
	if p < numParams {
		return paramNames[p]
	}
	return fmt.Sprintf("Param(%d)", uint8(p))
}

// LookupParam finds a tracked setting by name, ignoring case as PostgreSQL
// does for setting names.
func LookupParam(name string) (Param, bool) {
	for p, n := range paramNames {
		if strings.EqualFold(name, n) {
			return Param(p), true
		}
	}
	return 0, false
}

// maxMillis is INT_MAX, the upper bound PostgreSQL gives every one of the
// tracked settings.
const maxMillis = math.MaxInt32

// timeUnitsHint is PostgreSQL's hint for a value with a unit it does not know.
const timeUnitsHint = `Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".`

// Parse reads value as PostgreSQL reads a millisecond setting such as
// statement_timeout (guc.c parse_int with GUC_UNIT_MS, then the range check):
// a C integer (decimal, 0x hex or 0 octal) or float, optional spaces, then an
// optional case-sensitive unit among us, ms, s, min, h, d. Fractions are
// rounded half to even to the next smaller unit and then to whole
// milliseconds, as PostgreSQL does. name appears in the error only, spelled
// as the client spelled it (PostgreSQL does the same).
//
// Errors are *pgerr.Error with SQLSTATE 22023 and PostgreSQL's text.
func Parse(name, value string) (time.Duration, error) {
	ms, hint, ok := parseMillis(value)
	if !ok {
		e := pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "%s": "%s"`, name, value)
		if hint != "" {
			e.Hint = hint
		}
		return 0, e
	}
	if ms < 0 || ms > maxMillis {
		return 0, pgerr.New(pgerr.InvalidParameterValue,
			`%d ms is outside the valid range for parameter "%s" (0 .. %d)`, ms, name, maxMillis)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Format prints d as PostgreSQL's SHOW prints a millisecond setting: whole
// milliseconds in the largest unit that represents them exactly ("1min",
// "90s", "1500ms"), and "0" for zero. Sub-millisecond parts are dropped.
func Format(d time.Duration) string {
	ms := int64(d / time.Millisecond)
	if ms <= 0 {
		return strconv.FormatInt(ms, 10)
	}
	for _, u := range showUnits {
		if ms%u.millis == 0 {
			return strconv.FormatInt(ms/u.millis, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

var showUnits = []struct {
	name   string
	millis int64
}{
	{"d", 24 * 60 * 60 * 1000},
	{"h", 60 * 60 * 1000},
	{"min", 60 * 1000},
	{"s", 1000},
}

// timeUnits is PostgreSQL's time_unit_conversion_table for GUC_UNIT_MS, in
// its order: a fractional value is rounded to a multiple of the next entry.
var timeUnits = []struct {
	name       string
	multiplier float64
}{
	{"d", 1000 * 60 * 60 * 24},
	{"h", 1000 * 60 * 60},
	{"min", 1000 * 60},
	{"s", 1000},
	{"ms", 1},
	{"us", 1.0 / 1000},
}

// maxUnitLen is PostgreSQL's MAX_UNIT_LEN: a longer unit is rejected.
const maxUnitLen = 3

// parseMillis mirrors parse_int. It returns the value in milliseconds (not yet
// range-checked), or ok=false with PostgreSQL's hint (possibly empty).
func parseMillis(s string) (ms int64, hint string, ok bool) {
	val, end, erange := cStrtol(s)
	if end < len(s) && (s[end] == '.' || s[end] == 'e' || s[end] == 'E') || erange {
		val, end, erange = cStrtod(s)
	}
	if end == 0 || erange {
		return 0, "", false // PostgreSQL gives no hint for these
	}
	for end < len(s) && isSpace(s[end]) {
		end++
	}
	if end < len(s) {
		v, ok := convertToMillis(val, s[end:])
		if !ok {
			return 0, timeUnitsHint, false
		}
		val = v
	}
	val = math.RoundToEven(val) // C rint in the default rounding mode
	if val > math.MaxInt32 || val < math.MinInt32 {
		return 0, "Value exceeds integer range.", false
	}
	return int64(val), "", true
}

// convertToMillis mirrors convert_to_base_unit for GUC_UNIT_MS.
func convertToMillis(val float64, unit string) (float64, bool) {
	n := 0
	for n < len(unit) && !isSpace(unit[n]) && n < maxUnitLen {
		n++
	}
	name, rest := unit[:n], unit[n:]
	for len(rest) > 0 && isSpace(rest[0]) {
		rest = rest[1:]
	}
	if rest != "" {
		return 0, false // unit too long, or garbage after it
	}
	for i, u := range timeUnits {
		if u.name != name {
			continue
		}
		v := val * u.multiplier
		if i+1 < len(timeUnits) {
			next := timeUnits[i+1].multiplier
			v = math.RoundToEven(v/next) * next
		}
		return v, true
	}
	return 0, false
}

// isSpace is C isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func digitVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// cStrtol mirrors glibc strtol(s, &end, 0) widened to float64: leading
// spaces, a sign, then 0x hex, 0 octal or decimal digits. end is 0 when
// nothing was converted; erange reports overflow of a 64-bit long.
func cStrtol(s string) (val float64, end int, erange bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base := 10
	switch {
	case i+2 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && digitVal(s[i+2]) < 16:
		base = 16
		i += 2
	case i < len(s) && s[i] == '0':
		base = 8
	}
	start := i
	var acc uint64
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // LONG_MIN's magnitude
	}
	for i < len(s) && digitVal(s[i]) < base {
		d := uint64(digitVal(s[i]))
		if !erange {
			if acc > (limit-d)/uint64(base) {
				erange = true
			} else {
				acc = acc*uint64(base) + d
			}
		}
		i++
	}
	if i == start {
		return 0, 0, false
	}
	val = float64(acc)
	if neg {
		val = -val
	}
	return val, i, erange
}

// cStrtod mirrors glibc strtod for the inputs parse_int hands it: those
// where strtol stopped at '.', 'e' or 'E' or overflowed, so the text starts
// (after spaces and a sign) with a digit or a dot. Hex floats ("0x1.8") are
// accepted as C accepts them. erange reports overflow, and underflow to zero
// or a subnormal, as glibc sets ERANGE for both.
func cStrtod(s string) (val float64, end int, erange bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	numStart := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	hex := i+1 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X')
	base, expChar := 10, byte('e')
	if hex {
		j := i + 2
		if j < len(s) && digitVal(s[j]) < 16 || j+1 < len(s) && s[j] == '.' && digitVal(s[j+1]) < 16 {
			base, expChar = 16, 'p'
			i = j
		}
	}
	mant, nonzero := 0, false
	for i < len(s) && digitVal(s[i]) < base {
		nonzero = nonzero || s[i] != '0'
		i, mant = i+1, mant+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && digitVal(s[i]) < base {
			nonzero = nonzero || s[i] != '0'
			i, mant = i+1, mant+1
		}
	}
	if mant == 0 {
		return 0, 0, false
	}
	hasExp := false
	if i < len(s) && (s[i]|0x20) == expChar {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && '0' <= s[j] && s[j] <= '9' {
			for j < len(s) && '0' <= s[j] && s[j] <= '9' {
				j++
			}
			i, hasExp = j, true
		}
	}
	text := s[numStart:i]
	if base == 16 && !hasExp {
		text += "p0" // Go wants the binary exponent C treats as optional
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return v, i, true
		}
		return 0, 0, false // cannot happen for the text matched above
	}
	if nonzero && math.Abs(v) < 0x1p-1022 {
		erange = true
	}
	return v, i, erange
}
