package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// AS OF $n over the extended protocol. The statement PostgreSQL prepares is
// the query without its AS OF clause, with the client's numbering: $n is
// declared (so PostgreSQL need not infer a type for a parameter it never
// sees used) and bound as NULL, and the client's value is read by the proxy
// at Bind. The client is told $n has the type it declared in its Parse, or
// the AS OF's cast ($1::timestamptz), or bigint: drivers that type their
// parameters from the server's description (pgx, asyncpg, JDBC) then send
// that; the others send text, of a number or of a timestamp.

// asOfParamOID is the type the AS OF parameter is prepared and described
// with: the client's, unless it left the type open (0, or unknown, which
// PostgreSQL cannot leave unresolved in a parameter it does not use).
func asOfParamOID(a *planner.AsOf, declared []uint32) uint32 {
	if i := a.Param - 1; i < len(declared) && declared[i] != 0 && declared[i] != pgtype.UnknownOID {
		return declared[i]
	}
	return a.ParamType
}

// withAsOf returns a copy of st whose AS OF (and its EXPLAIN TIMESTAMP's
// inner statement's) is a. Planned statements are shared: never modified.
func withAsOf(st *planner.Statement, a *planner.AsOf) *planner.Statement {
	out := *st
	out.AsOf = a
	if e := st.ExplainTimestamp; e != nil {
		inner := *e.Inner
		inner.AsOf = a
		out.ExplainTimestamp = &planner.ExplainTimestampStmt{Format: e.Format, Inner: &inner}
	}
	return &out
}

// prepareAsOfParam adapts the Parse of a statement with AS OF $n: the
// parameter types to prepare, and the statement as the session keeps it
// (its AS OF typed as the client was told).
func prepareAsOfParam(st *planner.Statement, oids, declared []uint32) ([]uint32, *planner.Statement) {
	if st.AsOf == nil || st.AsOf.Param == 0 {
		return oids, st
	}
	a := *st.AsOf
	a.ParamType = asOfParamOID(st.AsOf, declared)
	if !a.ParamElsewhere {
		oids = withParamOID(oids, a.Param, a.ParamType)
	}
	return oids, withAsOf(st, &a)
}

// withParamOID returns a copy of oids, long enough for parameter n, with
// n's type set.
func withParamOID(oids []uint32, n int, oid uint32) []uint32 {
	out := make([]uint32, max(len(oids), n))
	copy(out, oids)
	out[n-1] = oid
	return out
}

// bindAsOfParam reads the AS OF parameter from a Bind: it returns st with
// the timestamp as its AS OF (a number of milliseconds) and the Bind's
// parameters to forward (the AS OF's own is NULL unless the query uses it
// too). It changes nothing for a statement without AS OF $n.
func (s *Session) bindAsOfParam(ctx context.Context, st *planner.Statement, m *pgproto3.Bind) (*planner.Statement, [][]byte, error) {
	a := st.AsOf
	if a == nil || a.Param == 0 || a.Param > len(m.Parameters) {
		// (Too few values: PostgreSQL reports it for the forwarded Bind.)
		return st, m.Parameters, nil
	}
	i := a.Param - 1
	ms, text, err := asOfParamMillis(a.Param, m.Parameters[i], paramFormat(m.ParameterFormatCodes, i), a.ParamType)
	if err != nil {
		return nil, nil, err
	}
	if text != "" {
		if ms, err = s.timestampOfText(ctx, text); err != nil {
			return nil, nil, err
		}
	}
	st, params := withAsOfValue(st, m.Parameters, ms)
	return st, params, nil
}

// withAsOfValue is st with its AS OF $n resolved to ms, and the Bind's
// parameters to forward (the AS OF's own is NULL unless the query uses it
// too).
func withAsOfValue(st *planner.Statement, params [][]byte, ms uint64) (*planner.Statement, [][]byte) {
	a := st.AsOf
	resolved := *a
	resolved.Expr, resolved.Param, resolved.Now = strconv.FormatUint(ms, 10), 0, nil
	if !a.ParamElsewhere {
		params = append([][]byte(nil), params...)
		params[a.Param-1] = nil
	}
	return withAsOf(st, &resolved), params
}

// paramFormat is the format code of parameter i under a Bind's codes.
func paramFormat(codes []int16, i int) int16 {
	switch {
	case len(codes) == 0:
		return 0
	case len(codes) == 1:
		return codes[0]
	case i < len(codes):
		return codes[i]
	}
	return 0
}

// asOfParamMillis decodes the value of AS OF parameter n, sent in format
// with type oid: milliseconds since the Unix epoch, or text for the backend
// to read as a number or a timestamptz (in the session's TimeZone and
// DateStyle).
func asOfParamMillis(n int, v []byte, format int16, oid uint32) (uint64, string, error) {
	if v == nil {
		return 0, "", pgerr.New("22004", "AS OF parameter $%d is null", n).
			WithHint("Bind milliseconds since the Unix epoch (bigint) or a timestamptz.")
	}
	if format == 0 {
		return 0, string(v), nil
	}
	badBinary := pgerr.New("22P03", "incorrect binary data format in bind parameter %d", n)
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		var i int64
		switch len(v) {
		case 2:
			i = int64(int16(binary.BigEndian.Uint16(v)))
		case 4:
			i = int64(int32(binary.BigEndian.Uint32(v)))
		case 8:
			i = int64(binary.BigEndian.Uint64(v))
		default:
			return 0, "", badBinary
		}
		return 0, strconv.FormatInt(i, 10), nil
	case pgtype.TimestamptzOID, pgtype.TimestampOID:
		if len(v) != 8 {
			return 0, "", badBinary
		}
		us := int64(binary.BigEndian.Uint64(v))
		if us == math.MaxInt64 || us == math.MinInt64 {
			return 0, "", invalidAsOf(n, "infinity")
		}
		t := postgresEpoch.Add(time.Duration(us) * time.Microsecond)
		if oid == pgtype.TimestampOID {
			// A wall-clock time: the session's TimeZone places it.
			return 0, t.UTC().Format("2006-01-02 15:04:05.999999"), nil
		}
		return 0, strconv.FormatInt(t.UnixMilli(), 10), nil
	case pgtype.NumericOID:
		text, err := numericText(v)
		if err != nil {
			return 0, "", badBinary
		}
		return 0, text, nil
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.UnknownOID, 0:
		return 0, string(v), nil
	}
	return 0, "", pgerr.New("42804", "AS OF parameter $%d has type OID %d", n, oid).
		WithHint("Bind milliseconds since the Unix epoch (bigint) or a timestamptz.")
}

// postgresEpoch is where PostgreSQL's binary timestamps count from.
var postgresEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// numericText is the integer part of a numeric in binary format, as text.
// NaN and infinities are errors.
func numericText(v []byte) (string, error) {
	if len(v) < 8 {
		return "", fmt.Errorf("short numeric")
	}
	ndigits := int(binary.BigEndian.Uint16(v))
	weight := int(int16(binary.BigEndian.Uint16(v[2:])))
	sign := binary.BigEndian.Uint16(v[4:])
	if len(v) != 8+2*ndigits || sign != 0 && sign != 0x4000 {
		return "", fmt.Errorf("bad numeric")
	}
	var b strings.Builder
	if sign == 0x4000 {
		b.WriteByte('-')
	}
	b.WriteByte('0')
	// Base-10000 digits; digit i is worth 10000^(weight-i).
	for i := 0; i <= weight; i++ {
		d := 0
		if i < ndigits {
			d = int(binary.BigEndian.Uint16(v[8+2*i:]))
		}
		fmt.Fprintf(&b, "%04d", d)
	}
	return b.String(), nil
}

// tooManyParams: the rewrite of st, with the parameter types declared,
// would need more parameters than a Parse holds (checkExplicitParse).
func tooManyParams(st *planner.Statement, declared []uint32) bool {
	t := st.Template
	return t != nil && t.Holes() > 0 && max(len(declared), t.Param()-1) >= math.MaxUint16
}

// asOfTypeKnown reports whether the type declared for st's AS OF $n, if
// any, needs no look-up (checkExplicitParse): none declared, or one the
// proxy reads (asOfParamMillis). oid is the type declared.
func asOfTypeKnown(st *planner.Statement, declared []uint32) (oid uint32, known bool) {
	a := st.AsOf
	if a == nil || a.Param == 0 || a.Param > len(declared) {
		return 0, true
	}
	oid = declared[a.Param-1]
	switch oid {
	case 0, pgtype.UnknownOID, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID,
		pgtype.TimestamptzOID, pgtype.TimestampOID, pgtype.DateOID, pgtype.TextOID, pgtype.VarcharOID:
		return oid, true
	}
	return oid, false
}

// invalidAsOf is the error for an AS OF timestamp that is no time.
func invalidAsOf(n int, v string) error {
	return pgerr.New(pgerr.InvalidParameterValue, "AS OF parameter $%d: %q is not a valid timestamp", n, v)
}

// checkExplicitParse refuses the Parse of a timestamped read with the
// client's 65535 parameters (the limit of a Parse: the rewrite needs one
// more), and that of a statement with AS OF $n whose
// Parse declared a type for $n that does not exist, as PostgreSQL refuses
// a parameter it uses with such a type (XX000, its catalog lookup's own
// message). The proxy reads the value itself and would otherwise take it
// as text; the backend never sees $n used, and would accept any OID. A
// type the proxy reads (asOfParamMillis) costs nothing; another is looked
// up in pg_type, the backend quiesced.
func (s *Session) checkExplicitParse(ctx context.Context, st *planner.Statement, declared []uint32) error {
	if tooManyParams(st, declared) {
		// The rewrite reads the timestamp from a parameter after the
		// client's (explicitRecord): a Parse holds at most 65535.
		return pgerr.New("54000", "a timestamped read over the extended protocol may have at most %d parameters", math.MaxUint16-1).
			WithHint("mzproxy binds the read's timestamp as one more parameter.")
	}
	oid, known := asOfTypeKnown(st, declared)
	if known {
		return nil
	}
	v, err := s.be.internalValue(ctx, "SELECT pg_catalog.count(*) FROM pg_catalog.pg_type WHERE oid = "+strconv.FormatUint(uint64(oid), 10))
	if err != nil {
		return err
	}
	if v == "0" {
		return pgerr.New(pgerr.InternalError, "cache lookup failed for type %d", oid)
	}
	return nil
}
