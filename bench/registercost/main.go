// Command registercost times a new database's registration, the lease's
// step of a first connection there (docs/corpus-cost.md, "Session 26"),
// in two shapes alternating round by round on one PostgreSQL: "separate",
// storage.Install and then register() as a statement and transaction of
// its own (the lease before session 26), and "folded",
// storage.InstallAndRegister (register() in the install's transaction).
// Each round copies a template database (storage.InstallTemplate, made
// first as lab_tmpl), connects to the copy, times the shape, and reads
// the copy's committed transactions (pg_stat_database.xact_commit, once
// its backend has exited); the copy, the connect and the reading are not
// timed. Use a cluster with fsync on: a commit's flush is part of what
// the fold saves.
//
// usage:
//
//	go run ./bench/registercost -url 'postgres://postgres@/%s?host=/tmp/pg&port=5432' [-n 40]
//
// (-url: a superuser's connection string with %s for the database.)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

func main() {
	url := flag.String("url", "", "a superuser's connection string, %s for the database")
	n := flag.Int("n", 40, "rounds per shape")
	flag.Parse()
	if err := run(context.Background(), *url, *n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const template = "lab_tmpl"

func run(ctx context.Context, url string, n int) error {
	admin, err := pgx.Connect(ctx, fmt.Sprintf(url, "postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	// A template left by an earlier run is made again.
	_, _ = admin.Exec(ctx, "ALTER DATABASE "+template+" IS_TEMPLATE false")
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+template); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		return err
	}
	t, err := pgx.Connect(ctx, fmt.Sprintf(url, template))
	if err != nil {
		return err
	}
	err = storage.InstallTemplate(ctx, t)
	t.Close(ctx)
	if err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+template+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	shapes := map[string]func(*pgx.Conn, storage.Registration) error{
		"separate": func(conn *pgx.Conn, r storage.Registration) error {
			if err := storage.Install(ctx, conn); err != nil {
				return err
			}
			var id, gen, floor int64
			return conn.QueryRow(ctx, "SELECT r_id, r_generation, r_floor FROM "+storage.Schema+".register($1, $2, $3, $4)", pgx.QueryExecModeExec,
				r.Generation, r.GraceMS, r.Host, r.PID).Scan(&id, &gen, &floor)
		},
		"folded": func(conn *pgx.Conn, r storage.Registration) error {
			_, err := storage.InstallAndRegister(ctx, conn, r)
			return err
		},
	}
	order := []string{"separate", "folded"}
	ms, commits := map[string][]float64{}, map[string][]int64{}
	for i := 0; i < 2*n; i++ {
		shape := order[(i+i/2)%2] // separate, folded, folded, separate, ...
		name := fmt.Sprintf("lab_%d_%d", os.Getpid(), i)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, fmt.Sprintf(url, name))
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = shapes[shape](conn, storage.Registration{GraceMS: 25000, Host: "registercost", PID: os.Getpid()})
		ms[shape] = append(ms[shape], float64(time.Since(t0).Microseconds())/1000)
		conn.Close(ctx)
		if err != nil {
			return err
		}
		// The copy's backend flushes its statistics as it exits.
		for k := 0; k < 100; k++ {
			var live int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&live); err != nil || live == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var c int64
		_, _ = admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
		if err := admin.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", name).Scan(&c); err != nil {
			return err
		}
		commits[shape] = append(commits[shape], c)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name); err != nil {
			return err
		}
	}
	for _, shape := range order {
		v := ms[shape]
		sort.Float64s(v)
		fmt.Printf("%-8s n=%d median %.2f ms (p25 %.2f, p75 %.2f, min %.2f); the copy's commits per round %v\n",
			shape, len(v), v[len(v)/2], v[len(v)/4], v[3*len(v)/4], v[0], commits[shape])
	}
	return nil
}
