package proxy

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

func TestAsOfParamMillis(t *testing.T) {
	be := func(n int, v uint64) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		return b[8-n:]
	}
	at := time.Date(2026, 12, 1, 14, 17, 15, 143_000_000, time.UTC)
	us := uint64(at.Sub(postgresEpoch) / time.Microsecond)
	// 1796137811143 as numeric: digits 1 7961 3781 1143, weight 3.
	numeric := []byte{0, 4, 0, 3, 0, 0, 0, 0, 0, 1, 0x1f, 0x19, 0x0e, 0xc5, 0x04, 0x77}
	for _, tc := range []struct {
		name   string
		v      []byte
		format int16
		oid    uint32
		ms     uint64
		text   string
		code   pgerr.Code
	}{
		{name: "text number", v: []byte("1796137811143"), text: "1796137811143"},
		{name: "text timestamp", v: []byte("2026-12-01 14:17:15+00"), oid: pgtype.TimestamptzOID, text: "2026-12-01 14:17:15+00"},
		{name: "int8", v: be(8, 1796137811143), format: 1, oid: pgtype.Int8OID, text: "1796137811143"},
		{name: "int4", v: be(4, 5), format: 1, oid: pgtype.Int4OID, text: "5"},
		{name: "int2 short", v: be(1, 5), format: 1, oid: pgtype.Int2OID, code: "22P03"},
		{name: "timestamptz", v: be(8, us), format: 1, oid: pgtype.TimestamptzOID, text: "1796134635143"},
		{name: "timestamp", v: be(8, us), format: 1, oid: pgtype.TimestampOID, text: "2026-12-01 14:17:15.143"},
		{name: "infinity", v: be(8, 1<<63-1), format: 1, oid: pgtype.TimestamptzOID, code: pgerr.InvalidParameterValue},
		{name: "numeric", v: numeric, format: 1, oid: pgtype.NumericOID, text: "00001796137811143"},
		{name: "binary text", v: []byte("now"), format: 1, oid: pgtype.TextOID, text: "now"},
		{name: "null", v: nil, code: "22004"},
		{name: "bool", v: []byte{1}, format: 1, oid: 16, code: "42804"},
	} {
		ms, text, err := asOfParamMillis(1, tc.v, tc.format, tc.oid)
		switch {
		case tc.code != "" && pgerr.Of(err) != tc.code:
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		case tc.code == "" && (err != nil || ms != tc.ms || text != tc.text):
			t.Errorf("%s: %d %q %v, want %d %q", tc.name, ms, text, err, tc.ms, tc.text)
		}
	}
}

func TestPrepareAsOfParam(t *testing.T) {
	st := &planner.Statement{AsOf: &planner.AsOf{Expr: "$2", Param: 2, ParamType: pgtype.Int8OID}}
	for _, tc := range []struct {
		declared []uint32
		want     []uint32
	}{
		{nil, []uint32{0, pgtype.Int8OID}},
		{[]uint32{23, 0}, []uint32{23, pgtype.Int8OID}},
		{[]uint32{23, pgtype.TimestamptzOID, 25}, []uint32{23, pgtype.TimestamptzOID, 25}},
		{[]uint32{0, pgtype.UnknownOID}, []uint32{0, pgtype.Int8OID}},
	} {
		oids, kept := prepareAsOfParam(st, tc.declared, tc.declared)
		if len(oids) != len(tc.want) || kept.AsOf.ParamType != tc.want[1] {
			t.Fatalf("declared %v: prepared %v, type %d; want %v", tc.declared, oids, kept.AsOf.ParamType, tc.want)
		}
		for i := range oids {
			if oids[i] != tc.want[i] {
				t.Fatalf("declared %v: prepared %v, want %v", tc.declared, oids, tc.want)
			}
		}
	}
	if st.AsOf.ParamType != pgtype.Int8OID {
		t.Fatal("the planned statement was modified")
	}
}

func TestMillisOfNumber(t *testing.T) {
	for _, tc := range []struct {
		text   string
		ms     uint64
		ok     bool
		failed bool
	}{
		{text: " 1796137811143 ", ms: 1796137811143, ok: true},
		{text: "1.796137811143e+12", ms: 1796137811143, ok: true},
		{text: "1796137811143.9", ms: 1796137811143, ok: true},
		{text: "-5", ok: true, failed: true},
		{text: "2026-12-01 14:17:15"},
		{text: "Infinity"},
		{text: "NaN"},
		{text: "0x10"},
	} {
		ms, ok, err := millisOfNumber(tc.text)
		if ms != tc.ms || ok != tc.ok || (err != nil) != tc.failed {
			t.Errorf("%q: %d %v %v, want %d %v (error: %v)", tc.text, ms, ok, err, tc.ms, tc.ok, tc.failed)
		}
	}
}
