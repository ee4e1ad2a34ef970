package timeouts

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/lib/pq"

	"github.com/mzproxy/mzproxy/pgerr"
)

// With -pg, the scripts under testdata/settings run a second time against a
// real PostgreSQL and must produce the same expected output, so the
// expectations are PostgreSQL's own. Example:
//
//	go test ./timeouts -run TestSettingsScripts -pg 'host=/tmp/pg user=postgres dbname=postgres sslmode=disable'
var pgDSN = flag.String("pg", "", "lib/pq DSN of a PostgreSQL to run the settings scripts against as well")

// TestSettingsScripts replays SQL scripts (BEGIN, SET, SET LOCAL, RESET,
// SAVEPOINT, ..., SHOW) against Settings. Commands:
//
//	connect         new session; input is the StartupMessage options string
//	exec            input is one SQL statement a line; output has SHOW
//	                results and errors
//	default source=config|backend|startup
//	                (model only) input lines name=value set a layer
func TestSettingsScripts(t *testing.T) {
	t.Run("model", func(t *testing.T) {
		datadriven.Walk(t, "testdata/settings", func(t *testing.T, path string) {
			model := &modelSession{}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				return runScriptCmd(t, d, model)
			})
		})
	})
	if *pgDSN == "" {
		return
	}
	t.Run("postgres", func(t *testing.T) {
		datadriven.Walk(t, "testdata/settings", func(t *testing.T, path string) {
			pg := &pgSession{dsn: *pgDSN}
			defer pg.close()
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Rewrite {
					t.Fatal("-rewrite takes the model's output; run it without -pg")
				}
				return runScriptCmd(t, d, pg)
			})
		})
	})
}

// session is what a script runs against: the model or a real server.
type session interface {
	connect(t *testing.T, options string) string
	exec(t *testing.T, stmt string) string
	setDefault(t *testing.T, src Source, name, value string) string
}

func runScriptCmd(t *testing.T, d *datadriven.TestData, s session) string {
	var out strings.Builder
	switch d.Cmd {
	case "connect":
		out.WriteString(s.connect(t, strings.TrimSpace(d.Input)))
	case "exec":
		for _, line := range strings.Split(d.Input, "\n") {
			line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ";"))
			if line == "" || strings.HasPrefix(line, "--") {
				continue
			}
			out.WriteString(s.exec(t, line))
		}
	case "default":
		var srcName string
		d.ScanArgs(t, "source", &srcName)
		src := map[string]Source{"config": SourceConfig, "backend": SourceBackend, "startup": SourceStartup}[srcName]
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			name, value, _ := strings.Cut(line, "=")
			out.WriteString(s.setDefault(t, src, name, value))
		}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func formatError(severity, code, msg, hint string) string {
	s := fmt.Sprintf("%s %s: %s\n", severity, code, msg)
	if hint != "" {
		s += "HINT: " + hint + "\n"
	}
	return s
}

func formatPgerr(err error) string {
	e := pgerr.As(err)
	return formatError(e.Severity, string(e.Code), e.Message, e.Hint)
}

// modelSession runs scripts against Settings, playing the part of the
// frontend for what Settings leaves to it: parsing the SQL, and the failed
// state of a transaction block after an error.
type modelSession struct {
	s      Settings
	failed bool
}

func (m *modelSession) connect(t *testing.T, options string) string {
	*m = modelSession{}
	opts, err := ParseStartupOptions(options)
	if err != nil {
		return formatPgerr(err)
	}
	for _, o := range opts {
		if _, ok := LookupParam(o.Name); !ok {
			continue // the backend's business
		}
		if err := m.s.SetDefault(SourceStartup, o.Name, o.Value); err != nil {
			*m = modelSession{}
			return formatPgerr(err)
		}
	}
	return ""
}

func (m *modelSession) setDefault(t *testing.T, src Source, name, value string) string {
	if err := m.s.SetDefault(src, name, value); err != nil {
		return formatPgerr(err)
	}
	return ""
}

var (
	reBegin      = regexp.MustCompile(`(?i)^(BEGIN|START TRANSACTION)\b`)
	reCommit     = regexp.MustCompile(`(?i)^(COMMIT|END)$`)
	reRollback   = regexp.MustCompile(`(?i)^(ROLLBACK|ABORT)$`)
	reSavepoint  = regexp.MustCompile(`(?i)^SAVEPOINT (\S+)$`)
	reRelease    = regexp.MustCompile(`(?i)^RELEASE( SAVEPOINT)? (\S+)$`)
	reRollbackTo = regexp.MustCompile(`(?i)^ROLLBACK TO( SAVEPOINT)? (\S+)$`)
	reResetAll   = regexp.MustCompile(`(?i)^RESET ALL$`)
	reReset      = regexp.MustCompile(`(?i)^RESET (\S+)$`)
	reSet        = regexp.MustCompile(`(?i)^SET( SESSION| LOCAL)? (\S+?)\s*(?:=|\sTO\s)\s*(.+)$`)
	reShow       = regexp.MustCompile(`(?i)^SHOW (\S+)$`)
)

// ident reads an SQL identifier: folded to lower case unless quoted.
func ident(s string) string {
	if strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`) && len(s) >= 2 {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return strings.ToLower(s)
}

func (m *modelSession) exec(t *testing.T, stmt string) string {
	shown, err := m.run(t, stmt)
	if err != nil {
		if m.s.InTransaction() {
			m.failed = true
		}
		return formatPgerr(err)
	}
	if shown != "" {
		return shown + "\n"
	}
	return ""
}

// run executes stmt and returns what SHOW printed, if stmt is a SHOW.
func (m *modelSession) run(t *testing.T, stmt string) (string, error) {
	switch {
	case reCommit.MatchString(stmt):
		if m.failed {
			m.s.Rollback()
		} else {
			m.s.Commit()
		}
		m.failed = false
		return "", nil
	case reRollbackTo.MatchString(stmt):
		if err := m.s.RollbackToSavepoint(ident(reRollbackTo.FindStringSubmatch(stmt)[2])); err != nil {
			return "", err
		}
		m.failed = false
		return "", nil
	case reRollback.MatchString(stmt):
		m.s.Rollback()
		m.failed = false
		return "", nil
	}
	if m.failed {
		return "", pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	}
	switch {
	case reBegin.MatchString(stmt):
		m.s.Begin()
		return "", nil
	case reSavepoint.MatchString(stmt):
		return "", m.s.Savepoint(ident(reSavepoint.FindStringSubmatch(stmt)[1]))
	case reRelease.MatchString(stmt):
		return "", m.s.ReleaseSavepoint(ident(reRelease.FindStringSubmatch(stmt)[2]))
	case reResetAll.MatchString(stmt):
		m.s.ResetAll()
		return "", nil
	case reReset.MatchString(stmt):
		return "", m.s.Reset(ident(reReset.FindStringSubmatch(stmt)[1]), false)
	case reShow.MatchString(stmt):
		return m.s.Show(ident(reShow.FindStringSubmatch(stmt)[1]))
	case reSet.MatchString(stmt):
		sm := reSet.FindStringSubmatch(stmt)
		local := strings.EqualFold(sm[1], " LOCAL")
		name, value := ident(sm[2]), strings.TrimSpace(sm[3])
		switch {
		case strings.EqualFold(value, "DEFAULT"):
			return "", m.s.Reset(name, local)
		case strings.HasPrefix(value, "'") && strings.HasSuffix(value, "'") && len(value) >= 2:
			value = strings.ReplaceAll(value[1:len(value)-1], "''", "'")
		case strings.HasPrefix(value, "E'") && strings.HasSuffix(value, "'"):
			r := strings.NewReplacer(`\t`, "\t", `\n`, "\n", `\\`, `\`, `''`, `'`)
			value = r.Replace(value[2 : len(value)-1])
		}
		return "", m.s.Set(name, value, local)
	}
	t.Fatalf("model cannot run %q", stmt)
	return "", nil
}

// pgSession runs scripts against a real PostgreSQL over one connection.
type pgSession struct {
	dsn  string
	db   *sql.DB
	conn *sql.Conn
}

func (p *pgSession) close() {
	if p.conn != nil {
		p.conn.Close()
	}
	if p.db != nil {
		p.db.Close()
	}
	p.conn, p.db = nil, nil
}

func formatPqError(t *testing.T, err error) string {
	var e *pq.Error
	if !errors.As(err, &e) {
		t.Fatalf("not a server error: %v", err)
	}
	return formatError(e.Severity, string(e.Code), e.Message, e.Hint)
}

func (p *pgSession) connect(t *testing.T, options string) string {
	p.close()
	dsn := p.dsn
	if options != "" {
		q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(options)
		dsn += " options='" + q + "'"
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	if err != nil {
		db.Close()
		return formatPqError(t, err)
	}
	p.db, p.conn = db, conn
	return ""
}

func (p *pgSession) setDefault(t *testing.T, src Source, name, value string) string {
	t.Skip("layers below startup options exist only in the model")
	return ""
}

func (p *pgSession) exec(t *testing.T, stmt string) string {
	if p.conn == nil {
		if out := p.connect(t, ""); out != "" {
			t.Fatalf("connect: %s", out)
		}
	}
	ctx := context.Background()
	if reShow.MatchString(stmt) {
		var v string
		if err := p.conn.QueryRowContext(ctx, stmt).Scan(&v); err != nil {
			return formatPqError(t, err)
		}
		return v + "\n"
	}
	if _, err := p.conn.ExecContext(ctx, stmt); err != nil {
		return formatPqError(t, err)
	}
	return ""
}
