package main

import (
	"io"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/observe"
)

// reloader applies a SIGHUP: it loads the configuration again (the config
// file may have changed; flags and environment cannot), applies the
// reloadable settings, re-reads the users file, and logs every other
// change as ignored until restart. A configuration that does not load or
// validate is logged and changes nothing.
type reloader struct {
	args      []string
	lookupEnv func(string) (string, bool) // os.LookupEnv
	running   *config                     // the settings in force: the start's, plus applied reloads
	log       *logrus.Entry
	users     *frontend.Users // nil when mzproxy started without a users file
	cert      *certificate    // nil when mzproxy started without TLS
	observer  *observe.Observer

	mu sync.Mutex // serializes reloads with attach
	// px is the proxy once it exists (an embedded backend starts first);
	// statementTimeout and occMaxRetries the settings to give it.
	px               *proxy.Proxy
	statementTimeout time.Duration
	occMaxRetries    int
}

// attach hands the reloader the proxy, with the default statement timeout
// as reloads have left it.
func (r *reloader) attach(px *proxy.Proxy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.px = px
	px.SetStatementTimeout(r.statementTimeout)
	px.SetOCCMaxAttempts(r.occMaxRetries + 1)
}

func (r *reloader) reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := loadConfig(r.args, r.lookupEnv, io.Discard)
	if err != nil {
		r.log.WithError(err).Error("SIGHUP: configuration not reloaded; the running one stays")
		return
	}
	logger := r.log.Logger
	names := make([]string, 0, len(next.values))
	for name := range next.values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		was, now := r.running.values[name], next.values[name]
		if was == now {
			continue
		}
		fields := logrus.Fields{"setting": name, "old": was, "new": now, "source": next.source[name]}
		if !reloadable[name] {
			r.log.WithFields(fields).Warn("SIGHUP: setting changed; ignored until restart")
			continue
		}
		switch name {
		case "log-level":
			level, _ := logrus.ParseLevel(now) // validated by loadConfig
			logger.SetLevel(level)
		case "log-format":
			_ = setFormat(logger, now) // validated by loadConfig
		case "slow-statement-threshold":
			r.observer.SetSlowThreshold(next.slowThreshold)
		case "statement-timeout":
			r.statementTimeout = next.statementTimeout
			if r.px != nil {
				r.px.SetStatementTimeout(next.statementTimeout)
			}
		case "occ-max-retries":
			r.occMaxRetries = next.occMaxRetries
			if r.px != nil {
				r.px.SetOCCMaxAttempts(next.occMaxRetries + 1)
			}
		case "tls-cert", "tls-key":
			if r.cert == nil || now == "" {
				// Whether clients may use TLS at all is decided at start.
				r.log.WithFields(fields).Warn("SIGHUP: setting changed; ignored until restart")
				continue
			}
		case "users-file":
			if r.users == nil || now == "" {
				// Without a users file at start, authentication was set up
				// without one (and the other way round).
				r.log.WithFields(fields).Warn("SIGHUP: setting changed; ignored until restart")
				continue
			}
		}
		r.running.values[name] = now
		r.log.WithFields(fields).Log(visible(logger), "SIGHUP: setting changed")
	}
	if r.users != nil {
		path := r.running.values["users-file"]
		users, err := frontend.LoadUsers(path)
		if err != nil {
			r.log.WithError(err).WithField("path", path).Error("SIGHUP: users file not reloaded; the loaded users stay")
		} else {
			r.users.Replace(users)
			r.log.WithField("path", path).Log(visible(logger), "SIGHUP: users file reloaded")
		}
	}
	if r.cert != nil {
		certFile, keyFile := r.running.values["tls-cert"], r.running.values["tls-key"]
		if err := r.cert.load(certFile, keyFile); err != nil {
			r.log.WithError(err).WithField("path", certFile).Error("SIGHUP: TLS certificate not reloaded; the loaded one stays")
		} else {
			r.log.WithField("path", certFile).Log(visible(logger), "SIGHUP: TLS certificate reloaded")
		}
	}
	r.log.Log(visible(logger), "SIGHUP: configuration reloaded")
}

// visible is info, or the logger's level when that hides info: what a
// reload did is always logged.
func visible(l *logrus.Logger) logrus.Level {
	if l.IsLevelEnabled(logrus.InfoLevel) {
		return logrus.InfoLevel
	}
	return l.GetLevel()
}
