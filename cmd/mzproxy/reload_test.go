package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/observe"
)

func TestReload(t *testing.T) {
	dir := t.TempDir()
	cfgPath, usersPath := filepath.Join(dir, "mzproxy.toml"), filepath.Join(dir, "users.txt")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cfgPath, "log-level = \"info\"\nauth = \"scram-sha-256\"\nusers-file = \""+usersPath+"\"\nmax-connections = 5\n")
	write(usersPath, "\"alice\" \"one\"\n")
	env := map[string]string{"MZPROXY_LOG_FORMAT": "text"}
	args := []string{"--config", cfgPath, "--shutdown-timeout", "5s"}
	cfg, err := loadConfig(args, lookup(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	users, err := frontend.LoadUsers(usersPath)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	l := logrus.New()
	l.SetOutput(&out)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	l.SetLevel(logrus.InfoLevel)
	obs, err := observe.New(observe.Config{SlowThreshold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &reloader{args: args, lookupEnv: lookup(env), running: cfg, log: logrus.NewEntry(l), users: users, observer: obs,
		statementTimeout: cfg.statementTimeout, occMaxRetries: cfg.occMaxRetries}
	px := proxy.New(proxy.Config{})
	r.attach(px)

	// Reloadable changes apply; others are reported; the users file is
	// re-read; flags and environment still win over the file.
	write(cfgPath, "log-level = \"warn\"\nauth = \"scram-sha-256\"\nusers-file = \""+usersPath+"\"\nmax-connections = 6\nshutdown-timeout = \"1s\"\nlog-format = \"json\"\nslow-statement-threshold = \"250ms\"\ntrace-exporter = \"stdout\"\nstatement-timeout = \"2s\"\nocc-max-retries = 3\n")
	write(usersPath, "\"bob\" \"two\"\n")
	r.reload()
	if l.GetLevel() != logrus.WarnLevel {
		t.Errorf("level = %v, want warn", l.GetLevel())
	}
	if got := obs.SlowThreshold(); got != 250*time.Millisecond {
		t.Errorf("slow threshold = %v, want 250ms", got)
	}
	if got := px.StatementTimeout(); got != 2*time.Second {
		t.Errorf("default statement timeout = %v, want 2s", got)
	}
	if got := px.OCCMaxAttempts(); got != 4 {
		t.Errorf("OCC attempts = %d, want 4 (3 retries)", got)
	}
	if _, ok := users.Lookup("bob"); !ok {
		t.Error("the users file was not re-read")
	}
	if _, ok := users.Lookup("alice"); ok {
		t.Error("a user removed from the file is still accepted")
	}
	log := out.String()
	for _, want := range []string{
		`level=warning msg="SIGHUP: setting changed" new=warn old=info setting=log-level`,
		`level=warning msg="SIGHUP: setting changed; ignored until restart" new=6 old=5 setting=max-connections`,
		`level=warning msg="SIGHUP: setting changed; ignored until restart" new=stdout old=none setting=trace-exporter`,
		`level=warning msg="SIGHUP: setting changed" new=250ms old=1s setting=slow-statement-threshold`,
		`msg="SIGHUP: users file reloaded"`,
		`msg="SIGHUP: configuration reloaded"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	for _, unwanted := range []string{"setting=shutdown-timeout", "setting=log-format"} {
		if strings.Contains(log, unwanted) {
			t.Errorf("log has %q, though flag or environment wins over the file:\n%s", unwanted, log)
		}
	}

	// A bad file changes nothing.
	out.Reset()
	write(cfgPath, "log-level = \"debug\"\nbogus = 1\n")
	r.reload()
	if l.GetLevel() != logrus.WarnLevel {
		t.Errorf("a bad file changed the level to %v", l.GetLevel())
	}
	if !strings.Contains(out.String(), `SIGHUP: configuration not reloaded`) || !strings.Contains(out.String(), `key \"bogus\"`) {
		t.Errorf("bad file: log %s", out.String())
	}
}
