package integration

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestEventLoopExtendedShapes sends the extended protocol's shapes around
// a point read, as raw bytes, to mzproxy (its event loop on) and to
// PostgreSQL directly, and wants the same answers from both: the unnamed
// Parse/Bind/Describe/Execute/Sync of a read (pgbench -M extended)
// several times, two such batches in one write (a pipeline), an error in
// the middle of a batch (the rest skipped to its Sync) and the batch
// after it, a Describe of a statement, a portal read a few rows at a time
// (Execute's row limit, PortalSuspended), a Close, and a batch ended by a
// Flush, answered before its Sync comes. Then a malformed frame ends that
// connection alone with 08P01, while another one goes on.
func TestEventLoopExtendedShapes(t *testing.T) {
	p := startProxy(t, "--event-loop")
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range msgs {
			var err error
			if b, err = m.Encode(b); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	read := func(sql string, param string) []byte {
		return enc(&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: [][]byte{[]byte(param)}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	const point = "SELECT $1::int * 2 AS v"
	steps := []struct {
		name  string
		send  []byte
		syncs int  // ReadyForQuery to read
		flush bool // read to the first CommandComplete, then send a Sync
	}{
		{"extended read", read(point, "1"), 1, false},
		{"extended read again", read(point, "2"), 1, false},
		{"another text", read("SELECT $1::text || 'x'", "a"), 1, false},
		{"two batches in one write", append(read(point, "3"), read(point, "4")...), 2, false},
		{"error mid-batch", append(read("SELECT 1 / $1::int", "0"), read(point, "5")...), 2, false},
		{"bind error", enc(&pgproto3.Parse{Query: point}, &pgproto3.Bind{},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}), 1, false},
		{"describe statement", enc(&pgproto3.Parse{Name: "s1", Query: "SELECT g, $1::text AS t FROM generate_series(1, 5) g"},
			&pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{}), 1, false},
		{"row limit", enc(&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "s1", Parameters: [][]byte{[]byte("y")}},
			&pgproto3.Describe{ObjectType: 'P', Name: "p1"}, &pgproto3.Execute{Portal: "p1", MaxRows: 2},
			&pgproto3.Execute{Portal: "p1", MaxRows: 2}, &pgproto3.Execute{Portal: "p1"}, &pgproto3.Sync{}), 1, false},
		{"close", enc(&pgproto3.Close{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{}), 1, false},
		{"closed statement", enc(&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{}), 1, false},
		{"flush without sync", enc(&pgproto3.Parse{Query: point}, &pgproto3.Bind{Parameters: [][]byte{[]byte("6")}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Flush{}), 1, true},
		{"after the flush", read(point, "7"), 1, false},
	}
	run := func(c *rawClient) []string {
		var out []string
		for _, s := range steps {
			c.write(s.send)
			var got []string
			if s.flush {
				got = append(got, readAnswers(c, 'C')...)
				c.write(enc(&pgproto3.Sync{}))
			}
			for range s.syncs {
				got = append(got, readAnswers(c, 'Z')...)
			}
			out = append(out, s.name+": "+strings.Join(got, " "))
		}
		return out
	}
	direct := dialDirectRaw(t)
	direct.startup()
	want := run(direct)
	other := p.dialRaw(t)
	other.startup()
	c := p.dialRaw(t)
	c.startup()
	got := run(c)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("through mzproxy\n  %s\nPostgreSQL\n  %s", got[i], want[i])
		}
	}
	// A frame shorter than its header: the connection that sent it ends
	// with 08P01, its neighbour is still served.
	bad := read(point, "8")
	binary.BigEndian.PutUint32(bad[1:], 2)
	c.write(bad)
	c.expectFatal("08P01")
	other.write(read(point, "21"))
	if ans := strings.Join(readAnswers(other, 'Z'), " "); !strings.Contains(ans, "D[42]") {
		t.Fatalf("the other connection after a malformed frame on its neighbour: %s", ans)
	}
}

// readAnswers reads a connection's messages up to one of type until and
// spells each as its type and what identifies it (a row's values, a
// tag, an error's SQLSTATE, the columns described). Notices and
// ParameterStatus are left out.
func readAnswers(c *rawClient, until byte) []string {
	c.t.Helper()
	var out []string
	for {
		m := c.receive()
		var s string
		var typ byte
		switch m := m.(type) {
		case *pgproto3.ParseComplete:
			s, typ = "1", '1'
		case *pgproto3.BindComplete:
			s, typ = "2", '2'
		case *pgproto3.CloseComplete:
			s, typ = "3", '3'
		case *pgproto3.NoData:
			s, typ = "n", 'n'
		case *pgproto3.PortalSuspended:
			s, typ = "s", 's'
		case *pgproto3.ParameterDescription:
			s, typ = fmt.Sprintf("t%v", m.ParameterOIDs), 't'
		case *pgproto3.RowDescription:
			var names []string
			for _, f := range m.Fields {
				names = append(names, fmt.Sprintf("%s/%d", f.Name, f.DataTypeOID))
			}
			s, typ = "T"+fmt.Sprint(names), 'T'
		case *pgproto3.DataRow:
			var vals []string
			for _, v := range m.Values {
				vals = append(vals, string(v))
			}
			s, typ = "D"+fmt.Sprint(vals), 'D'
		case *pgproto3.CommandComplete:
			s, typ = "C["+string(m.CommandTag)+"]", 'C'
		case *pgproto3.ErrorResponse:
			s, typ = "E["+m.Code+"]", 'E'
		case *pgproto3.ReadyForQuery:
			s, typ = "Z"+string(m.TxStatus), 'Z'
		default:
			continue
		}
		out = append(out, s)
		if typ == until {
			return out
		}
	}
}
