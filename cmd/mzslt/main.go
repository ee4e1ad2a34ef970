// Command mzslt runs sqllogictest files against a PostgreSQL-wire endpoint
// (mzproxy or PostgreSQL directly); the format is described in package slt.
//
//	mzslt --url 'postgres://postgres@/postgres?host=/tmp/pg' [flags] file.slt...
//
// Each file runs in a database of its own, created through the URL's
// database and dropped afterwards (--no-fresh-db runs in the URL's
// database). It prints one line per file, "<file>: N passed, N failed, N
// skipped", and ends with the total, "N passed, N failed, N skipped",
// alone on the last line; --verbose first prints every failure with
// file:line, SQL, expected and actual output. The exit status is 1 when a
// record failed or a file could not run, 2 for bad usage. With --expect
// FILE (lines "<path> <passed> <failed> <skipped>", matched against the
// end of each file's path) the exit status instead says whether every
// file's counts are the expected ones, e.g.
//
//	mzslt --url ... --expect cmd/mzslt/testdata/sqlite-expected.txt \
//		"$MZPROXY_SLT_DIR"/select*.test "$MZPROXY_SLT_DIR"/evidence/*.test
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/mzproxy/mzproxy/cmd/mzslt/slt"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mzslt", flag.ContinueOnError)
	fl.SetOutput(stderr)
	url := fl.String("url", os.Getenv("MZSLT_URL"), "postgres:// URL or libpq connection string of the endpoint (env MZSLT_URL)")
	protocol := fl.String("protocol", "extended", "simple or extended query protocol")
	noFresh := fl.Bool("no-fresh-db", false, "run in the URL's database instead of a fresh database per file")
	verbose := fl.Bool("verbose", false, "print each failure with file:line, SQL, expected and actual output")
	rewrite := fl.Bool("rewrite", false, "write actual results back into the files")
	engine := fl.String("engine", "postgresql", "engine name for skipif/onlyif")
	timeout := fl.Duration("timeout", 2*time.Minute, "time limit per record (0: none)")
	timings := fl.String("timings", "", "write each record's wall time (and each connect's and database's) to this file: <file> <line> <what> <microseconds>, tab-separated")
	expect := fl.String("expect", "", "file of expected per-file counts (<path> <passed> <failed> <skipped>); exit status then says whether the counts match")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: mzslt --url postgres://... [flags] file.slt...\n")
		fl.PrintDefaults()
	}
	// Flags may come before, between or after the files.
	var files []string
	for {
		if err := fl.Parse(args); err != nil {
			return 2
		}
		if fl.NArg() == 0 {
			break
		}
		files = append(files, fl.Arg(0))
		args = fl.Args()[1:]
	}
	if *url == "" || len(files) == 0 {
		fl.Usage()
		return 2
	}
	var exp slt.Expected
	if *expect != "" {
		f, err := os.Open(*expect)
		if err != nil {
			fmt.Fprintln(stderr, "mzslt:", err)
			return 2
		}
		exp, err = slt.ReadExpected(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "mzslt: %s: %v\n", *expect, err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := slt.Options{
		URL:      *url,
		Protocol: slt.Protocol(*protocol),
		FreshDB:  !*noFresh,
		Engine:   *engine,
		Rewrite:  *rewrite,
		Timeout:  *timeout,
	}
	if *verbose {
		opts.Verbose = stdout
	}
	if *timings != "" {
		f, err := os.Create(*timings)
		if err != nil {
			fmt.Fprintln(stderr, "mzslt:", err)
			return 2
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		defer w.Flush()
		opts.Timings = w
	}
	rep, err := slt.Run(ctx, opts, files...)
	if err != nil {
		fmt.Fprintln(stderr, "mzslt:", err)
		return 2
	}
	if exp != nil {
		for _, d := range exp.Compare(rep) {
			fmt.Fprintln(stderr, "mzslt: unexpected counts:", d)
		}
	}
	rep.Write(stdout)
	switch {
	case exp != nil && len(exp.Compare(rep)) > 0:
		return 1
	case exp != nil:
		return 0
	case !rep.OK():
		return 1
	}
	return 0
}
