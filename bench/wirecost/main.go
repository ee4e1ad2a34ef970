// Command wirecost sends a backend the messages of n autocommit writes in
// one of the shapes mzproxy (or a client directly) sends them, and prints
// the backend's pid first. bench/writecost.sh runs it against a backend
// under callgrind: the difference between a run of n and one of fewer
// writes, divided by the difference, is one write's backend instructions,
// with the connection's start-up and the caches' warm-up cancelled.
//
//	direct-simple    Query "<write>"
//	direct-prepared  Bind/Execute/Sync of the write's named statement
//	slot-query       Query "<slot>;\n<write>"
//	                 (mzproxy's simple protocol up to storage version 29)
//	slot-exec        Bind/Execute of the slot's named statement, then
//	                 Query "<write>" (its simple protocol since version 30)
//	slot-prepared    Bind/Execute of the slot's named statement, then the
//	                 write's Bind/Execute/Sync (its extended protocol)
//
// The writes are an UPDATE of a random pgbench_accounts row (-write
// update, the rows chosen by a sequence that -seed starts), of one
// pgbench_branches row (-write counter) or a blind INSERT into
// pgbench_history (-write insert).
//
// -write tpcb is pgbench's TPC-B transaction block instead (BEGIN; three
// UPDATEs, a SELECT, an INSERT; END: seven round trips, scale 1), in the
// shapes direct-simple and direct-prepared as above, and as mzproxy sends
// it (each line one round trip):
//
//	block-simple     Bind/Execute/Sync of pin_peek's named statement,
//	                 Query "BEGIN"; Query "SELECT mzproxy.open_write_deferred(NULL)",
//	                 Query "<first UPDATE>"; then each Query as it came
//	block-prepared   the same peek and BEGIN; Bind/Execute/Close of the
//	                 deferred slot's named statement, then the first
//	                 UPDATE's Bind/Execute/Sync; then each as it came
//
// The slot is -slot: proxy (default), what this tree's mzproxy sends
// (storage.OpenWriteFor without an incarnation: since storage version 44
// a flat statement), or occ, "SELECT mzproxy.begin_write_occ(NULL, 0)"
// (what it sent before; any storage version since 7 has it).
//
// -peek=false leaves the peek out of the block shapes: what a writing
// block would cost without it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

func main() {
	dsn := flag.String("dsn", "", "backend connection string")
	shape := flag.String("shape", "slot-exec", "direct-simple, direct-prepared, slot-query, slot-exec or slot-prepared")
	write := flag.String("write", "update", "update, counter (one pgbench_branches row), insert or tpcb (a block)")
	n := flag.Int("n", 220, "writes")
	seed := flag.Uint64("seed", 1, "the rows' sequence")
	flag.BoolVar(&peek, "peek", true, "send pin_peek before a block's BEGIN (-write tpcb)")
	slot := flag.String("slot", "proxy", "the slot: proxy (this tree's mzproxy's) or occ (begin_write_occ)")
	flag.Parse()

	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(conn.PID())
	hj, err := conn.Hijack()
	if err != nil {
		log.Fatal(err)
	}
	fe := hj.Frontend
	if *write == "tpcb" {
		tpcb(fe, *shape, *n, *seed)
		return
	}
	text, param := statement(*write)
	slotSQL := storage.OpenWriteFor(-1)
	switch *slot {
	case "proxy":
	case "occ":
		slotSQL = "SELECT mzproxy.begin_write_occ(NULL, 0)"
	default:
		log.Fatalf("unknown slot %q", *slot)
	}
	if *shape == "slot-exec" || *shape == "slot-prepared" {
		fe.Send(&pgproto3.Parse{Name: "slot", Query: slotSQL})
	}
	if *shape == "direct-prepared" || *shape == "slot-prepared" {
		fe.Send(&pgproto3.Parse{Name: "w", Query: param})
	}
	fe.Send(&pgproto3.Sync{})
	flushAndRead(fe)

	aid := *seed
	for i := 0; i < *n; i++ {
		aid = (aid*6364136223846793005 + 1442695040888963407) % (1 << 63)
		key := strconv.FormatUint(aid%100000+1, 10)
		if *write == "counter" {
			key = "1" // one row, every write: its versions pile up as a hot row's do
		}
		switch *shape {
		case "direct-simple":
			fe.Send(&pgproto3.Query{String: fmt.Sprintf(text, key)})
		case "slot-query":
			fe.Send(&pgproto3.Query{String: slotSQL + ";\n" + fmt.Sprintf(text, key)})
		case "slot-exec":
			sendSlot(fe)
			fe.Send(&pgproto3.Query{String: fmt.Sprintf(text, key)})
		case "direct-prepared", "slot-prepared":
			if *shape == "slot-prepared" {
				sendSlot(fe)
			}
			fe.Send(&pgproto3.Bind{PreparedStatement: "w", Parameters: [][]byte{[]byte(key)}})
			fe.Send(&pgproto3.Execute{})
			fe.Send(&pgproto3.Sync{})
		default:
			log.Fatalf("unknown shape %q", *shape)
		}
		flushAndRead(fe)
	}
	fe.Send(&pgproto3.Terminate{})
	_ = fe.Flush()
	_ = hj.Conn.Close()
}

// tpcbStatements is pgbench's tpcb-like script, without BEGIN and END, as
// the simple protocol's texts (%[1]d aid, %[2]d tid, %[3]d bid, %[4]d
// delta) and as prepared statements' ($1 ... in that order).
var tpcbStatements = [][2]string{
	{"UPDATE pgbench_accounts SET abalance = abalance + %[4]d WHERE aid = %[1]d;", "UPDATE pgbench_accounts SET abalance = abalance + $4 WHERE aid = $1"},
	{"SELECT abalance FROM pgbench_accounts WHERE aid = %[1]d;", "SELECT abalance FROM pgbench_accounts WHERE aid = $1"},
	{"UPDATE pgbench_tellers SET tbalance = tbalance + %[4]d WHERE tid = %[2]d;", "UPDATE pgbench_tellers SET tbalance = tbalance + $4 WHERE tid = $2"},
	{"UPDATE pgbench_branches SET bbalance = bbalance + %[4]d WHERE bid = %[3]d;", "UPDATE pgbench_branches SET bbalance = bbalance + $4 WHERE bid = $3"},
	{"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (%[2]d, %[3]d, %[1]d, %[4]d, CURRENT_TIMESTAMP);",
		"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($2, $3, $1, $4, CURRENT_TIMESTAMP)"},
}

// peek is -peek.
var peek bool

// tpcb runs n TPC-B blocks in shape (see the header).
func tpcb(fe *pgproto3.Frontend, shape string, n int, seed uint64) {
	block := strings.HasPrefix(shape, "block-")
	prepared := strings.HasSuffix(shape, "-prepared")
	if shape != "direct-simple" && shape != "direct-prepared" && shape != "block-simple" && shape != "block-prepared" {
		log.Fatalf("unknown shape %q for tpcb", shape)
	}
	if block {
		fe.Send(&pgproto3.Parse{Name: "peek", Query: storage.PinPeekSQL})
		fe.Send(&pgproto3.Parse{Name: "slot", Query: storage.OpenWriteDeferredFor(-1)})
	}
	if prepared {
		for i, st := range tpcbStatements {
			// Typed as pgbench's are: its parameters are ints.
			fe.Send(&pgproto3.Parse{Name: "s" + strconv.Itoa(i), Query: st[1], ParameterOIDs: []uint32{23, 23, 23, 23}[:params(st[1])]})
		}
	}
	fe.Send(&pgproto3.Sync{})
	flushAndRead(fe)

	x := seed
	next := func(m uint64) int {
		x = (x*6364136223846793005 + 1442695040888963407) % (1 << 63)
		return int(x%m) + 1
	}
	for i := 0; i < n; i++ {
		aid, tid, bid, delta := next(100000), next(10), 1, next(10001)-5001
		if block && peek {
			fe.Send(&pgproto3.Bind{PreparedStatement: "peek"})
			fe.Send(&pgproto3.Execute{})
			fe.Send(&pgproto3.Sync{})
		}
		fe.Send(&pgproto3.Query{String: "BEGIN;"})
		// The peek's Sync answers with a ReadyForQuery of its own: read
		// it too, or the client runs ahead of the backend (see
		// readAnswers).
		if block && peek {
			readAnswers(fe, 2)
		} else {
			flushAndRead(fe)
		}
		for j, st := range tpcbStatements {
			first := block && j == 0
			switch {
			case first && !prepared:
				fe.Send(&pgproto3.Query{String: storage.OpenWriteDeferredFor(-1)})
			case first:
				sendSlot(fe)
				fe.Send(&pgproto3.Close{ObjectType: 'P', Name: "slot"})
			}
			if !prepared {
				fe.Send(&pgproto3.Query{String: fmt.Sprintf(st[0], aid, tid, bid, delta)})
			} else {
				args := [][]byte{[]byte(strconv.Itoa(aid)), []byte(strconv.Itoa(tid)), []byte(strconv.Itoa(bid)), []byte(strconv.Itoa(delta))}
				fe.Send(&pgproto3.Bind{PreparedStatement: "s" + strconv.Itoa(j), Parameters: args[:params(st[1])]})
				fe.Send(&pgproto3.Execute{})
				fe.Send(&pgproto3.Sync{})
			}
			if first && !prepared {
				// The slot's Query and the statement's: two answers.
				readAnswers(fe, 2)
			} else {
				flushAndRead(fe)
			}
		}
		fe.Send(&pgproto3.Query{String: "END;"})
		flushAndRead(fe)
	}
	fe.Send(&pgproto3.Terminate{})
	_ = fe.Flush()
}

// params is the number of parameters a prepared statement's text names
// ($1 up to $4, in order of first use: every one up to the highest).
func params(sql string) int {
	for k := 4; k > 0; k-- {
		if strings.Contains(sql, "$"+strconv.Itoa(k)) {
			return k
		}
	}
	return 0
}

func statement(write string) (text, param string) {
	switch write {
	case "update":
		return "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = %s;",
			"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = $1"
	case "counter":
		return "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = %s;",
			"UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = $1"
	case "insert":
		return "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, %s, 1, CURRENT_TIMESTAMP);",
			"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, $1, 1, CURRENT_TIMESTAMP)"
	}
	log.Fatalf("unknown write %q", write)
	return "", ""
}

func sendSlot(fe *pgproto3.Frontend) {
	fe.Send(&pgproto3.Bind{DestinationPortal: "slot", PreparedStatement: "slot"})
	fe.Send(&pgproto3.Execute{Portal: "slot"})
}

// flushAndRead flushes and reads up to the ReadyForQuery; any error ends
// the run.
func flushAndRead(fe *pgproto3.Frontend) { readAnswers(fe, 1) }

// readAnswers flushes and reads up to the n-th ReadyForQuery: one per
// Query and per Sync sent since the last read. Reading fewer lets the
// client run ahead, and at Terminate the backend has not run the blocks
// still queued (its socket is reset when the client closes with answers
// unread): until session 22 the block shapes read 7 answers of a
// block's 9 (block-simple), 8 (block-simple -peek=false, block-prepared)
// or 7 (block-prepared -peek=false), so the backend ran about 78, 88 or
// all of every 100 blocks counted, and the figures per block were that
// much too low (docs/write-cost.md, "Session 22").
func readAnswers(fe *pgproto3.Frontend, n int) {
	if err := fe.Flush(); err != nil {
		log.Fatal(err)
	}
	for n > 0 {
		msg, err := fe.Receive()
		if err != nil {
			log.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			fmt.Fprintf(os.Stderr, "error %s: %s\n", m.Code, m.Message)
			os.Exit(1)
		case *pgproto3.ReadyForQuery:
			n--
		}
	}
}
