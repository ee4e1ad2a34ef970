package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigPrecedence: a flag wins over the environment, the environment
// over the config file, the file over the default.
func TestConfigPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		// want is checked against config.values (flag text) and source.
		want       map[string]string
		wantSource map[string]string
	}{
		{
			name:       "defaults",
			want:       map[string]string{"listen": "127.0.0.1:6875", "metrics-listen": "127.0.0.1:6876", "max-connections": "100", "shutdown-timeout": "30s", "log-level": "info"},
			wantSource: map[string]string{"listen": "the default"},
		},
		{
			name:       "file over default",
			file:       "max-connections = 7\nlog-level = \"debug\"\nshutdown-timeout = \"5s\"\nallow-trust-non-loopback = true\n",
			want:       map[string]string{"max-connections": "7", "log-level": "debug", "shutdown-timeout": "5s", "allow-trust-non-loopback": "true", "listen": "127.0.0.1:6875"},
			wantSource: map[string]string{"max-connections": "config file CONFIG", "listen": "the default"},
		},
		{
			name:       "env over file",
			file:       "max-connections = 7\nlog-level = \"debug\"\n",
			env:        map[string]string{"MZPROXY_MAX_CONNECTIONS": "8"},
			want:       map[string]string{"max-connections": "8", "log-level": "debug"},
			wantSource: map[string]string{"max-connections": "environment variable MZPROXY_MAX_CONNECTIONS", "log-level": "config file CONFIG"},
		},
		{
			name:       "flag over env over file",
			args:       []string{"--max-connections", "9"},
			file:       "max-connections = 7\n",
			env:        map[string]string{"MZPROXY_MAX_CONNECTIONS": "8"},
			want:       map[string]string{"max-connections": "9"},
			wantSource: map[string]string{"max-connections": "the command line"},
		},
		{
			name: "an empty env value still wins",
			file: "backend = \"postgres://db/postgres\"\n",
			env:  map[string]string{"MZPROXY_BACKEND": ""},
			want: map[string]string{"backend": ""},
		},
		{
			name: "repeatable setting from the file",
			file: "pg-setting = [\"fsync=off\", \"work_mem=64MB\"]\n",
			want: map[string]string{"pg-setting": "fsync=off,work_mem=64MB"},
		},
		{
			name: "repeatable setting: flags replace the file's",
			args: []string{"--pg-setting", "a=1"},
			file: "pg-setting = [\"fsync=off\"]\n",
			want: map[string]string{"pg-setting": "a=1"},
		},
		{
			name: "config file named by the environment",
			env:  map[string]string{"MZPROXY_CONFIG": "CONFIG"},
			file: "max-connections = 3\n",
			want: map[string]string{"max-connections": "3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, env := withConfigFile(t, tc.args, tc.env, tc.file)
			c, err := loadConfig(args, lookup(env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			path := env["MZPROXY_CONFIG"]
			if path == "" && len(args) > 1 {
				path = args[1]
			}
			for k, want := range tc.want {
				if got := c.values[k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			for k, want := range tc.wantSource {
				want = strings.ReplaceAll(want, "CONFIG", path)
				if got := c.source[k]; got != want {
					t.Errorf("source of %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestConfigFields: values reach the typed fields, not only the text.
func TestConfigFields(t *testing.T) {
	args, env := withConfigFile(t, nil, nil, "shutdown-timeout = \"1m30s\"\nhistory-reads = true\nmax-message-size = 2048\n")
	c, err := loadConfig(args, lookup(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.shutdownTimeout != 90*time.Second || !c.historyReads || c.maxMessageSize != 2048 {
		t.Errorf("got shutdown-timeout %v, history-reads %v, max-message-size %d", c.shutdownTimeout, c.historyReads, c.maxMessageSize)
	}
}

// TestTickInterval: --tick-interval reaches the leases, 1 s by default
// (Materialize's), 0 meaning never.
func TestTickInterval(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, time.Second},
		{[]string{"--tick-interval", "250ms"}, 250 * time.Millisecond},
		{[]string{"--tick-interval", "0"}, -1},
	} {
		c, err := loadConfig(tc.args, lookup(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.leaseConfig().TickInterval; got != tc.want {
			t.Errorf("%v: lease TickInterval %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestConfigErrors: every bad setting is named, with where it came from.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string // substrings of the error
	}{
		{name: "unknown key", file: "colour = \"red\"\n", want: []string{`key "colour": unknown key`}},
		{name: "underscore key", file: "max_connections = 5\n", want: []string{`key "max_connections": unknown key; did you mean "max-connections"?`}},
		{name: "table", file: "[listen]\nhost = \"x\"\n", want: []string{`key "listen": want a string, got a table`}},
		{name: "int as string", file: "max-connections = \"5\"\n", want: []string{`key "max-connections": want an integer, got the string "5"`}},
		{name: "duration as int", file: "shutdown-timeout = 30\n", want: []string{`key "shutdown-timeout": want a duration string such as "30s"`}},
		{name: "bad duration", file: "shutdown-timeout = \"soon\"\n", want: []string{`key "shutdown-timeout": invalid value "soon"`}},
		{name: "bool as string", file: "history-reads = \"yes\"\n", want: []string{`key "history-reads": want true or false`}},
		{name: "list of ints", file: "pg-setting = [1]\n", want: []string{`key "pg-setting": want an array of strings`}},
		{name: "nested config", file: "config = \"other.toml\"\n", want: []string{`key "config": a config file cannot name another`}},
		{name: "toml syntax", file: "listen = \n", want: []string{"config file", "line 1"}},
		{name: "several at once", file: "a = 1\nb = 2\n", want: []string{`key "a"`, `key "b"`}},
		{name: "missing file", args: []string{"--config", "/nonexistent/mzproxy.toml"}, want: []string{"--config: open /nonexistent/mzproxy.toml"}},
		{name: "yaml", args: []string{"--config", "mzproxy.yaml"}, want: []string{"--config mzproxy.yaml: mzproxy's config file is TOML"}},
		{name: "bad env int", env: map[string]string{"MZPROXY_MAX_CONNECTIONS": "many"}, want: []string{"environment variable MZPROXY_MAX_CONNECTIONS"}},
		{name: "negative from file", file: "max-connections = -1\n", want: []string{"max-connections: want 0 (no limit) or more, got -1 (from config file"}},
		{name: "log level from env", env: map[string]string{"MZPROXY_LOG_LEVEL": "loud"}, want: []string{`log-level: want debug, info, warn or error, got "loud" (from environment variable MZPROXY_LOG_LEVEL)`}},
		{name: "log format from flag", args: []string{"--log-format", "yaml"}, want: []string{`log-format: want text or json, got "yaml" (from the command line)`}},
		{name: "listen", args: []string{"--listen", "6875"}, want: []string{`listen: want host:port, got "6875"`}},
		{name: "listen port", args: []string{"--listen", "localhost:http"}, want: []string{`listen: want a port number`}},
		{name: "metrics-listen", file: "metrics-listen = \"x\"\n", want: []string{`metrics-listen: want host:port`}},
		{name: "auth", args: []string{"--auth", "md5"}, want: []string{`auth: want trust, scram-sha-256 or passthrough, got "md5"`}},
		{name: "scram without users", args: []string{"--auth", "scram-sha-256"}, want: []string{"auth: scram-sha-256 needs users-file"}},
		{name: "tls half", args: []string{"--tls-cert", "c.pem"}, want: []string{"tls-cert and tls-key go together"}},
		{name: "message size", args: []string{"--max-message-size", "10"}, want: []string{"max-message-size: want at least 1024 bytes"}},
		{name: "pg-setting", args: []string{"--pg-setting", "fsync"}, want: []string{`pg-setting: want name=value, got "fsync"`}},
		{name: "backend", args: []string{"--backend", "postgres://u:secret@host:notaport/db"}, want: []string{"backend: not a valid PostgreSQL URL"}},
		{name: "argument", args: []string{"serve"}, want: []string{`unexpected argument "serve"`}},
		{name: "trace exporter", env: map[string]string{"MZPROXY_TRACE_EXPORTER": "jaeger"}, want: []string{`trace-exporter: want none, stdout or otlp, got "jaeger" (from environment variable MZPROXY_TRACE_EXPORTER)`}},
		{name: "otlp without endpoint", args: []string{"--trace-exporter", "otlp"}, want: []string{"trace-exporter: otlp needs trace-otlp-endpoint"}},
		{name: "otlp endpoint", file: "trace-exporter = \"otlp\"\ntrace-otlp-endpoint = \"collector:4318\"\n", want: []string{`trace-otlp-endpoint: want an http:// or https:// URL, got "collector:4318" (from config file`}},
		{name: "slow threshold", args: []string{"--slow-statement-threshold", "-1s"}, want: []string{"slow-statement-threshold: want 0 (off) or more, got -1s"}},
		{name: "negative tick", env: map[string]string{"MZPROXY_TICK_INTERVAL": "-1s"}, want: []string{"tick-interval: want 0 (never) or more, got -1s (from environment variable MZPROXY_TICK_INTERVAL)"}},
		{name: "tiny tick", file: "tick-interval = \"1ms\"\n", want: []string{"tick-interval: want 0 (never) or at least 10ms, got 1ms (from config file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, env := withConfigFile(t, tc.args, tc.env, tc.file)
			_, err := loadConfig(args, lookup(env), &bytes.Buffer{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the backend password: %q", err)
			}
		})
	}
}

// TestHelp: --help lists every setting with its default and variable.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := loadConfig([]string{"--help"}, lookup(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	fs := newFlagSet(&config{}, map[string]kind{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "--"+f.Name+" ") || !strings.Contains(out.String(), envName(f.Name)) {
			t.Errorf("--help lacks %s", f.Name)
		}
	})
	for _, want := range []string{"(default 127.0.0.1:6875; env MZPROXY_LISTEN)", "env MZPROXY_LOG_LEVEL; reloadable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReadmeListsEverySetting keeps the README's table in step with the flags.
func TestReadmeListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := newFlagSet(&config{}, map[string]kind{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") {
			t.Errorf("README.md's settings table lacks --%s", f.Name)
		}
	})
}

// withConfigFile writes file (if any) and adds --config to args, unless
// the environment names the file (MZPROXY_CONFIG = "CONFIG").
func withConfigFile(t *testing.T, args []string, env map[string]string, file string) ([]string, map[string]string) {
	t.Helper()
	if file == "" {
		return args, env
	}
	path := filepath.Join(t.TempDir(), "mzproxy.toml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if env["MZPROXY_CONFIG"] == "CONFIG" {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		e["MZPROXY_CONFIG"] = path
		return args, e
	}
	return append([]string{"--config", path}, args...), env
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// TestComposeSettings: the flags docker-compose.yml gives the proxies, with
// the environment the Dockerfile sets, are valid settings.
func TestComposeSettings(t *testing.T) {
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	in := false
	for _, line := range strings.Split(string(compose), "\n") {
		switch item, isItem := strings.CutPrefix(line, "    - "); {
		case strings.TrimSpace(line) == "command:":
			in = true
		case in && isItem:
			args = append(args, item)
		default:
			in = false
		}
	}
	if len(args) == 0 {
		t.Fatal("no command in docker-compose.yml")
	}
	env := map[string]string{"MZPROXY_LISTEN": "0.0.0.0:6875", "MZPROXY_METRICS_LISTEN": "0.0.0.0:6876"}
	c, err := loadConfig(args, lookup(env), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("docker-compose.yml's mzproxy command %q: %v", args, err)
	}
	if c.auth != "scram-sha-256" || c.listen != "0.0.0.0:6875" || c.backend == "" {
		t.Errorf("compose settings: auth %q listen %q backend %q", c.auth, c.listen, c.backend)
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		if !strings.Contains(string(dockerfile), k+"="+v) {
			t.Errorf("the Dockerfile does not set %s=%s", k, v)
		}
	}
}
