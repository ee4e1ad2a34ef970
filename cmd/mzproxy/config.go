package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/occ"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/lease"
)

// config is every setting of mzproxy. Each setting is a flag, an
// environment variable MZPROXY_<NAME> (upper case, dashes as underscores)
// and a key of the TOML file named by --config; the flag wins over the
// environment, the environment over the file, the file over the default.
type config struct {
	configFile        string
	listen            string
	metricsListen     string
	backend           string
	dataDir           string
	pgBinDir          string
	pgUser            string
	auth              string
	usersFile         string
	allowTrustRemote  bool
	tlsCert, tlsKey   string
	maxConnections    int
	maxMessageSize    int
	shutdownTimeout   time.Duration
	statementTimeout  time.Duration
	logLevel          string
	logFormat         string
	embeddedPGSetting stringList
	historyReads      bool
	noTemplate        bool
	eventLoop         bool
	traceExporter     string
	traceEndpoint     string
	slowThreshold     time.Duration
	occMaxRetries     int
	occMaxConcurrent  int
	generation        int
	heartbeat         time.Duration
	leaseGrace        time.Duration
	compaction        time.Duration
	tick              time.Duration
	retainHistory     time.Duration
	idleRelease       time.Duration

	// values is each setting's value as text, by name, and source where
	// it came from: SIGHUP compares them to report what changed.
	values map[string]string
	source map[string]string
}

// reloadable are the settings a SIGHUP applies to the running process.
// Others take effect at the next start; a reload that changes one logs
// that it is ignored until then.
var reloadable = map[string]bool{
	"log-level":  true,
	"log-format": true,
	"users-file": true, // re-read on every SIGHUP, changed or not
	"tls-cert":   true, // with tls-key, re-read on every SIGHUP when TLS is on
	"tls-key":    true,

	"slow-statement-threshold": true,
	"statement-timeout":        true, // sessions follow from their next statement
	"occ-max-retries":          true, // writes that start after the reload follow
}

// kinds are what a config file key must hold, by the flag's type.
type kind int

const (
	kindString kind = iota
	kindInt
	kindBool
	kindDuration
	kindList // repeatable flag: a TOML array of strings (or one string)
)

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// newFlagSet defines every setting on c. kinds gets each setting's kind.
func newFlagSet(c *config, kinds map[string]kind) *flag.FlagSet {
	fs := flag.NewFlagSet("mzproxy", flag.ContinueOnError)
	str := func(p *string, name, def, help string) { fs.StringVar(p, name, def, help); kinds[name] = kindString }
	num := func(p *int, name string, def int, help string) { fs.IntVar(p, name, def, help); kinds[name] = kindInt }
	boolean := func(p *bool, name string, def bool, help string) {
		fs.BoolVar(p, name, def, help)
		kinds[name] = kindBool
	}

	str(&c.configFile, "config", "", "TOML file of settings; keys are the flag names (e.g. max-connections = 50)")
	str(&c.listen, "listen", "127.0.0.1:6875", "address for PostgreSQL clients (host:port)")
	str(&c.metricsListen, "metrics-listen", "127.0.0.1:6876", "address of the HTTP server for /metrics, /livez and /readyz (host:port; empty: none; the default is skipped with a warning when in use)")
	str(&c.backend, "backend", "", "PostgreSQL backend URL (postgres://...); empty starts an embedded PostgreSQL")
	str(&c.dataDir, "data-dir", "./mzdata", "data directory of the embedded PostgreSQL")
	str(&c.pgBinDir, "pg-bindir", "", "directory of the PostgreSQL server binaries for the embedded backend (default: PATH, pg_config --bindir, newest /usr/lib/postgresql/*/bin)")
	str(&c.pgUser, "pg-user", "postgres", "unprivileged OS user that runs the embedded PostgreSQL when mzproxy runs as root")
	fs.Var(&c.embeddedPGSetting, "pg-setting", "extra name=value setting for the embedded PostgreSQL (repeatable; in the file an array of strings)")
	kinds["pg-setting"] = kindList
	str(&c.auth, "auth", "", "client authentication: trust, scram-sha-256 or passthrough (default: trust on a loopback listener, else required)")
	str(&c.usersFile, "users-file", "", "users file for scram-sha-256 (lines: \"name\" \"password or SCRAM verifier\")")
	boolean(&c.allowTrustRemote, "allow-trust-non-loopback", false, "allow trust authentication on a non-loopback listener")
	str(&c.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key enables TLS for clients")
	str(&c.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	num(&c.maxConnections, "max-connections", 100, "maximum concurrent client sessions (0: no limit)")
	num(&c.maxMessageSize, "max-message-size", wire.DefaultMaxMessageSize, "maximum size of one client protocol message in bytes")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long busy sessions may finish before they are cut")
	kinds["shutdown-timeout"] = kindDuration
	fs.DurationVar(&c.statementTimeout, "statement-timeout", 0, "statement_timeout of sessions that get none from their startup options or their role's or database's defaults (0: none)")
	kinds["statement-timeout"] = kindDuration
	str(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	str(&c.logFormat, "log-format", "text", "log format: text or json")
	str(&c.traceExporter, "trace-exporter", "none", "where statement traces go: none, stdout (JSON spans on standard output) or otlp (OTLP over HTTP to --trace-otlp-endpoint)")
	str(&c.traceEndpoint, "trace-otlp-endpoint", "", "OTLP/HTTP collector URL for --trace-exporter otlp (e.g. http://localhost:4318)")
	fs.DurationVar(&c.slowThreshold, "slow-statement-threshold", time.Second, "log statements that take at least this long, with their phases and trace id (0: none)")
	kinds["slow-statement-threshold"] = kindDuration
	num(&c.occMaxRetries, "occ-max-retries", occ.DefaultMaxAttempts-1, "optimistic writes: compare-and-appends retried after a conflict before the statement fails with 40001")
	num(&c.occMaxConcurrent, "occ-max-concurrent", 0, "autocommit writes running at once per proxy (more queue, FIFO); 0: no bound")
	dur := func(p *time.Duration, name string, def time.Duration, help string) {
		fs.DurationVar(p, name, def, help)
		kinds[name] = kindDuration
	}
	num(&c.generation, "generation", 0, "generation of this proxy: a higher one than the newest registered fences the older proxies' writes; 0 joins the newest")
	dur(&c.heartbeat, "heartbeat-interval", lease.DefaultInterval, "how often the proxy renews its lease and publishes its read holds in each database")
	dur(&c.leaseGrace, "lease-grace", lease.DefaultGrace, "a proxy without a heartbeat for this long is retired: its holds stop counting and it must register again")
	dur(&c.compaction, "compaction-interval", lease.DefaultCompactInterval, "how often the proxy holding the compaction lock compacts history (0: this proxy never compacts)")
	dur(&c.tick, "tick-interval", lease.DefaultTickInterval, "the most a database's upper and mz_now() trail the clock while nothing is written: the proxy holding its tick lock commits an empty write when no write did (0: this proxy never ticks)")
	dur(&c.idleRelease, "idle-release", proxy.DefaultIdleRelease, "how long the proxy keeps its own connections to a database (and its lease there) after the database's last client session through it ended, so that the database can be dropped directly (0: until the proxy stops)")
	dur(&c.retainHistory, "retain-history", lease.DefaultRetention, "history kept of a table without RETAIN HISTORY (when this proxy compacts)")
	boolean(&c.noTemplate, "no-template", false, "copy template1 for a client's CREATE DATABASE as written and install mzproxy's schema at the first connection, instead of copying the template database mzproxy_template that holds it")
	boolean(&c.historyReads, "history-reads", false, "read managed tables through their history at the oracle's timestamp, even for reads of the present (for conformance testing of the rewrite; slower)")
	boolean(&c.eventLoop, "event-loop", true, "drive sessions idle outside a transaction with an epoll event loop on Linux: their plain reads (simple or extended protocol) are forwarded with one read and one write each way, bypassing Go's netpoller (fewer system calls per point read)")
	return fs
}

// envName is the environment variable of a setting.
func envName(setting string) string {
	return "MZPROXY_" + strings.ToUpper(strings.ReplaceAll(setting, "-", "_"))
}

// loadConfig reads the settings from args (without the program name), the
// environment (through lookupEnv) and the config file, and validates them.
// Usage and flag errors are written to out. It returns flag.ErrHelp for
// -h/--help.
func loadConfig(args []string, lookupEnv func(string) (string, bool), out io.Writer) (*config, error) {
	c := &config{values: map[string]string{}, source: map[string]string{}}
	kinds := map[string]kind{}
	fs := newFlagSet(c, kinds)
	fs.SetOutput(out)
	fs.Usage = func() { usage(fs, out) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })

	// The file's name can only come from the command line or the
	// environment.
	path := c.configFile
	if v, ok := lookupEnv(envName("config")); ok && !onCommandLine["config"] {
		path = v
	}
	file, err := readConfigFile(path, fs, kinds)
	if err != nil {
		return nil, err
	}

	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		switch env := envName(f.Name); {
		case onCommandLine[f.Name]:
			c.source[f.Name] = "the command line"
		case hasEnv(lookupEnv, env):
			v, _ := lookupEnv(env)
			c.source[f.Name] = "environment variable " + env
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s: invalid value %q: %v", env, v, err))
			}
		case file[f.Name] != nil:
			c.source[f.Name] = "config file " + path
			for _, v := range file[f.Name] {
				if err := f.Value.Set(v); err != nil {
					errs = append(errs, fmt.Errorf("config file %s: key %q: invalid value %q: %v", path, f.Name, v, err))
				}
			}
		default:
			c.source[f.Name] = "the default"
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	fs.VisitAll(func(f *flag.Flag) { c.values[f.Name] = f.Value.String() })
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func hasEnv(lookupEnv func(string) (string, bool), name string) bool {
	_, ok := lookupEnv(name)
	return ok
}

// readConfigFile returns the settings of a TOML file as the text values
// to give each flag. Unknown keys and values of the wrong type are errors
// naming the key.
func readConfigFile(path string, fs *flag.FlagSet, kinds map[string]kind) (map[string][]string, error) {
	if path == "" {
		return nil, nil
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" || ext == ".json" {
		return nil, fmt.Errorf("--config %s: mzproxy's config file is TOML (key = value lines, e.g. mzproxy.toml), not %s", path, ext[1:])
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := map[string][]string{}
	var errs []error
	for _, k := range keys {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("config file %s: key %q: %s", path, k, fmt.Sprintf(format, args...)))
		}
		kd, known := kinds[k]
		switch {
		case k == "config":
			bad("a config file cannot name another")
			continue
		case !known:
			if alt := strings.ReplaceAll(k, "_", "-"); fs.Lookup(alt) != nil && alt != k {
				bad("unknown key; did you mean %q?", alt)
			} else {
				bad("unknown key (keys are the names of mzproxy's flags; see mzproxy --help)")
			}
			continue
		}
		v := raw[k]
		switch kd {
		case kindString, kindDuration:
			s, ok := v.(string)
			if !ok {
				want := "a string"
				if kd == kindDuration {
					want = `a duration string such as "30s"`
				}
				bad("want %s, got %s", want, describe(v))
				continue
			}
			out[k] = []string{s}
		case kindInt:
			n, ok := v.(int64)
			if !ok {
				bad("want an integer, got %s", describe(v))
				continue
			}
			out[k] = []string{strconv.FormatInt(n, 10)}
		case kindBool:
			b, ok := v.(bool)
			if !ok {
				bad("want true or false, got %s", describe(v))
				continue
			}
			out[k] = []string{strconv.FormatBool(b)}
		case kindList:
			switch v := v.(type) {
			case string:
				out[k] = []string{v}
			case []any:
				list := []string{}
				for _, e := range v {
					s, ok := e.(string)
					if !ok {
						bad("want an array of strings, got an element %s", describe(e))
						break
					}
					list = append(list, s)
				}
				out[k] = list
			default:
				bad("want an array of strings, got %s", describe(v))
			}
		}
	}
	return out, errors.Join(errs...)
}

// describe names a TOML value's type for an error.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// validate checks values that parse but make no sense, naming each bad
// setting and where its value came from.
func (c *config) validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s (from %s)", name, fmt.Sprintf(format, args...), c.source[name]))
	}
	if err := checkHostPort(c.listen); err != nil {
		bad("listen", "%v", err)
	}
	if c.metricsListen != "" {
		if err := checkHostPort(c.metricsListen); err != nil {
			bad("metrics-listen", "%v", err)
		}
	}
	if c.backend != "" {
		if _, err := pgconn.ParseConfig(c.backend); err != nil {
			// pgconn's message can quote the URL, password and all.
			bad("backend", "not a valid PostgreSQL URL or connection string")
		}
	}
	switch c.auth {
	case "", "trust", "scram-sha-256", "passthrough":
	default:
		bad("auth", "want trust, scram-sha-256 or passthrough, got %q", c.auth)
	}
	if c.auth == "scram-sha-256" && c.usersFile == "" {
		bad("auth", "scram-sha-256 needs users-file")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		bad("tls-cert", "tls-cert and tls-key go together")
	}
	if c.maxConnections < 0 {
		bad("max-connections", "want 0 (no limit) or more, got %d", c.maxConnections)
	}
	if c.occMaxRetries < 0 {
		bad("occ-max-retries", "want 0 or more, got %d", c.occMaxRetries)
	}
	if c.occMaxConcurrent < 0 {
		bad("occ-max-concurrent", "want 0 or more, got %d", c.occMaxConcurrent)
	}
	if c.maxMessageSize < 1024 {
		bad("max-message-size", "want at least 1024 bytes, got %d", c.maxMessageSize)
	}
	if c.statementTimeout < 0 {
		bad("statement-timeout", "want 0 or more, got %v", c.statementTimeout)
	}
	if c.shutdownTimeout < 0 {
		bad("shutdown-timeout", "want 0 or more, got %v", c.shutdownTimeout)
	}
	if c.generation < 0 {
		bad("generation", "want 0 or more, got %d", c.generation)
	}
	if c.heartbeat <= 0 {
		bad("heartbeat-interval", "want more than 0, got %v", c.heartbeat)
	}
	if c.leaseGrace < 2*c.heartbeat {
		bad("lease-grace", "want at least twice heartbeat-interval (%v), got %v", c.heartbeat, c.leaseGrace)
	}
	if c.compaction < 0 {
		bad("compaction-interval", "want 0 (never) or more, got %v", c.compaction)
	}
	if c.tick < 0 {
		bad("tick-interval", "want 0 (never) or more, got %v", c.tick)
	} else if c.tick > 0 && c.tick < 10*time.Millisecond {
		bad("tick-interval", "want 0 (never) or at least 10ms, got %v", c.tick)
	}
	if c.retainHistory < time.Millisecond {
		bad("retain-history", "want at least 1ms, got %v", c.retainHistory)
	}
	if _, err := logrus.ParseLevel(c.logLevel); err != nil {
		bad("log-level", "want debug, info, warn or error, got %q", c.logLevel)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		bad("log-format", "want text or json, got %q", c.logFormat)
	}
	switch c.traceExporter {
	case traceNone, traceStdout:
	case traceOTLP:
		if c.traceEndpoint == "" {
			bad("trace-exporter", "otlp needs trace-otlp-endpoint")
		} else if u, err := url.Parse(c.traceEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("trace-otlp-endpoint", "want an http:// or https:// URL, got %q", c.traceEndpoint)
		}
	default:
		bad("trace-exporter", "want none, stdout or otlp, got %q", c.traceExporter)
	}
	if c.slowThreshold < 0 {
		bad("slow-statement-threshold", "want 0 (off) or more, got %v", c.slowThreshold)
	}
	for _, s := range c.embeddedPGSetting {
		if name, _, ok := strings.Cut(s, "="); !ok || name == "" {
			bad("pg-setting", "want name=value, got %q", s)
		}
	}
	return errors.Join(errs...)
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("want a port number in %q", addr)
	}
	return nil
}

// usage is mzproxy --help: every setting with its default, environment
// variable and whether SIGHUP reloads it.
func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, `Usage: mzproxy [flags]

mzproxy is a PostgreSQL-wire proxy that gives a PostgreSQL backend
Materialize's timestamp and consistency model.

Every setting below is a flag, an environment variable MZPROXY_<NAME> (upper
case, dashes as underscores) and a key of the TOML file named by --config
(e.g. max-connections = 50). A flag wins over the environment, the
environment over the file, the file over the default. Unknown keys and bad
values stop mzproxy at start with an error naming the setting.

Signals: SIGINT/SIGTERM drain and stop (a second one stops at once); SIGHUP
re-reads the config file and the users file and applies the settings marked
"reloadable"; changes to others are logged as ignored until restart.

Settings:
`)
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		if typ == "" {
			typ = "bool"
		}
		fmt.Fprintf(out, "  --%s %s\n", f.Name, typ)
		fmt.Fprintf(out, "        %s\n", help)
		var notes []string
		if f.DefValue != "" {
			notes = append(notes, "default "+f.DefValue)
		}
		notes = append(notes, "env "+envName(f.Name))
		if reloadable[f.Name] {
			notes = append(notes, "reloadable")
		}
		fmt.Fprintf(out, "        (%s)\n", strings.Join(notes, "; "))
	})
}
