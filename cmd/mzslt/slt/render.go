package slt

import (
	"crypto/md5"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
)

// boolOID is PostgreSQL's bool type; psqlODBC hands booleans to the
// original runner as "1"/"0", so they render that way in T, I and R columns.
const boolOID = 16

// cell is one value as it came off the wire, in text format.
type cell struct {
	s    string
	null bool
}

// render turns one text-format value into what the original sqllogictest
// prints for the column type typ when it runs against PostgreSQL through
// psqlODBC (slt_odbc3.c):
//
//   - T: SQLGetData as SQL_C_CHAR: NULL, "(empty)" for "", every byte
//     outside 0x20-0x7E as '@'.
//   - I: SQLGetData as SQL_C_SLONG, which psqlODBC does with atoi: the
//     leading integer of the text ("2.5" -> 2, "abc" -> 0), kept to 32 bits.
//   - R: SQLGetData as SQL_C_DOUBLE (atof), printed "%.3f", so an integer
//     5 prints 5.000.
//
// psqlODBC turns a bool into "1"/"0" before any of that. B and O are
// Materialize's types: B prints true/false, O the text as is.
func render(typ byte, oid uint32, c cell) string {
	if c.null {
		return "NULL"
	}
	s := c.s
	if oid == boolOID && typ != 'B' {
		s = odbcBool(s)
	}
	switch typ {
	case 'I':
		return strconv.FormatInt(int64(atoi32(s)), 10)
	case 'R':
		return formatC3(atof(s))
	case 'B':
		switch s {
		case "t":
			return "true"
		case "f":
			return "false"
		}
		return s
	case 'O':
		return s
	default: // 'T'
		return printable(s)
	}
}

// odbcBool is psqlODBC's "change T/F to 1/0".
func odbcBool(s string) string {
	if s == "" {
		return "0"
	}
	switch s[0] {
	case 'f', 'F', 'n', 'N', '0':
		return "0"
	}
	return "1"
}

// printable renders a T value: "(empty)" for the empty string, then every
// byte outside 0x20-0x7E (so each byte of a multi-byte UTF-8 character) as
// '@'.
func printable(s string) string {
	if s == "" {
		return "(empty)"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] < 0x20 || b[j] > 0x7e {
					b[j] = '@'
				}
			}
			return string(b)
		}
	}
	return s
}

func isCSpace(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}

// atoi32 is glibc's atoi: (int)strtol(s, NULL, 10). strtol skips leading
// white space, takes an optional sign and the longest run of digits, and
// saturates at the 64-bit limits; the cast to int then keeps the low 32 bits.
func atoi32(s string) int32 {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var v uint64
	over := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		switch {
		case over:
		case v > (1<<63)/10:
			over = true
		default:
			v = v*10 + uint64(s[i]-'0')
			over = v > 1<<63
		}
	}
	var n int64
	switch {
	case neg && (over || v >= 1<<63):
		n = math.MinInt64
	case neg:
		n = -int64(v)
	case over || v >= 1<<63:
		n = math.MaxInt64
	default:
		n = int64(v)
	}
	return int32(n)
}

// atof is C's atof: strtod over the longest numeric prefix (white space,
// sign, digits, point, exponent, or inf/infinity/nan), 0 when there is none.
func atof(s string) float64 {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	s = s[i:]
	j := 0
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	lower := strings.ToLower(s[j:])
	for _, w := range []string{"infinity", "inf", "nan"} {
		if strings.HasPrefix(lower, w) {
			f, _ := strconv.ParseFloat(s[:j+len(w)], 64)
			return f
		}
	}
	digits := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
		digits++
	}
	if j < len(s) && s[j] == '.' {
		j++
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
			digits++
		}
	}
	if digits == 0 {
		return 0
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			j = k
		}
	}
	f, _ := strconv.ParseFloat(s[:j], 64) // out of range gives ±Inf or 0, as strtod does
	return f
}

// formatC3 is printf("%.3f"), including C's spelling of infinities and NaN.
func formatC3(f float64) string {
	switch {
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', 3, 64)
}

// sortValues applies a sort mode to row-major values of ncol columns. Rows
// compare column by column, bytewise, like the original's rowCompare.
func sortValues(vals []string, ncol int, mode Sort) {
	switch mode {
	case ValueSort:
		slices.Sort(vals)
	case RowSort:
		if ncol <= 0 || len(vals)%ncol != 0 {
			return
		}
		rows := make([][]string, len(vals)/ncol)
		for i := range rows {
			rows[i] = vals[i*ncol : (i+1)*ncol : (i+1)*ncol]
		}
		slices.SortFunc(rows, func(a, b []string) int { return slices.Compare(a, b) })
		out := make([]string, 0, len(vals))
		for _, r := range rows {
			out = append(out, r...)
		}
		copy(vals, out)
	}
}

// hashValues is the md5 of every value followed by a newline, lower-case
// hex.
func hashValues(vals []string) string {
	n := 0
	for _, v := range vals {
		n += len(v) + 1
	}
	buf := make([]byte, 0, n)
	for _, v := range vals {
		buf = append(append(buf, v...), '\n')
	}
	sum := md5.Sum(buf)
	return hex.EncodeToString(sum[:])
}

// hashLine is the expected-output line for n values with md5 sum.
func hashLine(n int, sum string) string {
	return strconv.Itoa(n) + " values hashing to " + sum
}

// parseHashLine recognises "<n> values hashing to <md5>".
func parseHashLine(s string) bool {
	f := strings.Fields(s)
	return len(f) == 5 && f[1] == "values" && f[2] == "hashing" && f[3] == "to"
}

// cockroachSplit splits one expected row of cockroach mode into its values:
// a single column takes the whole line; otherwise values are separated by
// white space and '␠' stands for a space inside a value.
func cockroachSplit(line string, ncol int) []string {
	var f []string
	if ncol == 1 {
		f = []string{strings.TrimSpace(line)}
	} else {
		f = strings.Fields(line)
	}
	for i := range f {
		f[i] = strings.ReplaceAll(f[i], "␠", " ")
	}
	return f
}

// cockroachJoin is the inverse of cockroachSplit, for --rewrite.
func cockroachJoin(row []string) string {
	out := make([]string, len(row))
	for i, v := range row {
		out[i] = strings.ReplaceAll(v, " ", "␠")
	}
	return strings.Join(out, " ")
}
