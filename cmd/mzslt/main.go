// Command mzslt runs sqllogictest files against a PostgreSQL-wire endpoint
// (mzproxy or PostgreSQL directly). It prints one line per file and ends
// with the total, "N passed, N failed, N skipped", alone on the last line.
// The exit status is 1 when a record failed or a file could not run (or,
// with --expect, when the per-file counts differ from the expected ones),
// 2 for bad usage.
package main

import (
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
