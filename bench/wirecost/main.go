// Command wirecost sends a backend the messages of n autocommit writes in
// one of the shapes mzproxy (or a client directly) sends them, and prints
// the backend's pid first. bench/writecost.sh runs it against a backend
// under callgrind: the difference between a run of n and one of fewer
// writes, divided by the difference, is one write's backend instructions,
// with the connection's start-up and the caches' warm-up cancelled.
//
//	direct-simple    Query "<write>"
//	direct-prepared  Bind/Execute/Sync of the write's named statement
//	slot-query       Query "SELECT mzproxy.begin_write_occ(NULL, 0);\n<write>"
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
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func main() {
	dsn := flag.String("dsn", "", "backend connection string")
	shape := flag.String("shape", "slot-exec", "direct-simple, direct-prepared, slot-query, slot-exec or slot-prepared")
	write := flag.String("write", "update", "update, counter (one pgbench_branches row) or insert")
	n := flag.Int("n", 220, "writes")
	seed := flag.Uint64("seed", 1, "the rows' sequence")
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
	text, param := statement(*write)
	const slotSQL = "SELECT mzproxy.begin_write_occ(NULL, 0)"
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
func flushAndRead(fe *pgproto3.Frontend) {
	if err := fe.Flush(); err != nil {
		log.Fatal(err)
	}
	for {
		msg, err := fe.Receive()
		if err != nil {
			log.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			fmt.Fprintf(os.Stderr, "error %s: %s\n", m.Code, m.Message)
			os.Exit(1)
		case *pgproto3.ReadyForQuery:
			return
		}
	}
}
