package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// dumpApplicationName is the application_name pg_dump connects with (its
// fallback_application_name; pg_dumpall's pg_dump runs use it too).
const dumpApplicationName = "pg_dump"

// dumpView is what a pg_dump session sees differently: not mzproxy's own
// schemas, functions, event triggers and history triggers (installed
// again by the proxy serving the database a dump is restored into), and
// each managed table's RETAIN HISTORY as a relation option that a restore
// through the proxy reads back.
var dumpView = planner.DumpView{
	HiddenSchemas: storage.DumpHiddenSchemas,
	Reloptions: func(rel string) string {
		return storage.DumpReloptions(rel, planner.RetainHistoryOption)
	},
}

// dumpQuery returns the Query a pg_dump session's m is forwarded as, with
// its frame: m itself when it reads no catalog that hides something.
func dumpQuery(m *pgproto3.Query, frame []byte) (*pgproto3.Query, []byte) {
	sql, ok := planner.HideFromDump(m.String, dumpView)
	if !ok {
		return m, frame
	}
	q := &pgproto3.Query{String: sql}
	return q, mustEncode(q)
}
