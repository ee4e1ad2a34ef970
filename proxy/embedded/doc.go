// Package embedded runs a private PostgreSQL server for mzproxy from the
// machine's own server binaries. It is what mzproxy uses when no backend is
// configured, and what integration tests use to get a real PostgreSQL.
//
// # Finding the binaries
//
// [FindBinDir] looks, in order, at an explicit directory (the --pg-bindir
// flag, [Config.BinDir]), $MZPROXY_PG_BINDIR, the first PATH entry holding
// both postgres and initdb, `pg_config --bindir`, the newest
// /usr/lib/postgresql/*/bin (Debian, Ubuntu), the newest /usr/pgsql-*/bin
// (PGDG RPMs) and /usr/local/pgsql/bin (a source build). An explicit
// directory or $MZPROXY_PG_BINDIR that lacks the binaries is an error, never
// silently skipped. Nothing is ever downloaded; when nothing is found the
// error ([ErrNoBinaries]) says which package to install and which flag or
// variable to set.
//
// # Layout of the data directory
//
//	DataDir/
//	  pgdata/         the cluster, created by initdb on first start
//	  pgdata.initdb/  initdb's work directory; renamed to pgdata when initdb succeeds,
//	                  so a killed first start never leaves a half-made cluster behind
//	  sock/           the Unix socket .s.PGSQL.<Port> (see below)
//	  postgres.log    output of initdb and postgres, appended to; a Start that
//	                  finds it over 64 MiB moves it to postgres.log.1 first
//	  mzproxy.lock    flock(2)ed by the Server that owns the directory
//
// The cluster is made with UTF8, locale C, trust authentication for local
// (Unix socket) connections and reject for every host line; the superuser is
// [Config.SuperUser]. PostgreSQL listens only on the Unix socket
// (listen_addresses is empty). Unix socket paths are limited to 107 bytes; when
// DataDir/sock/.s.PGSQL.<Port> would be longer, the socket directory is
// /tmp/mzproxy-<hash of DataDir> instead (created 0700, and refused if it
// exists with another owner or as a symlink); it is removed again when the
// postmaster exits.
//
// max_connections defaults to 200 since every proxy session holds a backend
// connection. fsync stays on unless [Config.Settings] turns it off; with
// fsync=off initdb also runs with --no-sync.
//
// # Running as root
//
// PostgreSQL refuses to run as root. When the process is root, initdb and
// postgres run as [Config.RunAsUser] ("postgres" by default) through
// SysProcAttr.Credential, and DataDir (plus any parents Start creates) is
// chowned to that user. Every existing ancestor of DataDir must be searchable
// by that user: Start checks this and fails with a message naming the
// directory, unless [Config.ChmodParents] is set, in which case it adds o+x
// (search, not read) to those directories. That option exists for tests:
// t.TempDir() is a 0700 directory inside a 0700 directory. mzproxy itself
// should not weaken /root behind the user's back, so it stays off by default.
// When the process is not root, everything runs as the current user and
// RunAsUser is ignored.
//
// # Lifetime
//
// The postmaster must never outlive mzproxy, not even a kill -9 of it. It is
// started with SysProcAttr.Pdeathsig = SIGQUIT (immediate shutdown; the next
// start does crash recovery from the WAL). The kernel sends that signal when
// the thread that forked the child exits, not the process, so the child is
// forked from a goroutine that holds runtime.LockOSThread until the postmaster
// has exited. The postmaster also gets its own process group (Setpgid), so a
// Ctrl-C at the terminal reaches mzproxy only, and mzproxy decides when the
// backend stops.
//
// [Server.Stop] sends SIGINT (fast shutdown) and waits; when its context ends
// first it sends SIGQUIT, and SIGKILL five seconds later (then also to any
// backend the killed postmaster left behind). [Server.Done] is closed when
// the postmaster has exited for any reason.
//
// # Leftovers from an earlier run
//
// A Server holds an flock on DataDir/mzproxy.lock for the postmaster's
// lifetime; a second Start on the same DataDir while it is held fails with
// [ErrDataDirInUse]. Once Start has the lock, nobody else manages this
// directory, so any postgres process still working in it (its working
// directory is our pgdata, read from /proc) is a leftover:
//
//   - a postmaster named by postmaster.pid or the socket lock file (its
//     mzproxy died without taking it along, e.g. on a system without
//     Pdeathsig, or it was started by hand) is stopped like Stop does:
//     SIGINT, then SIGQUIT, then SIGKILL;
//   - backends orphaned by a postmaster that was SIGKILLed (one busy in a long
//     query notices only when it next waits) get SIGQUIT, then SIGKILL,
//     so that no process of the old run writes beside the new postmaster.
//
// Then stale lock files: a postmaster.pid naming a dead process is left to
// postgres, which removes it after checking that no process still has the
// old shared memory attached; one naming a live process that is not ours
// (a recycled pid) or no pid at all would make postgres refuse to start, so
// it is removed, as is a socket lock file that names no postmaster of ours.
//
// # Platforms
//
// The guarantees above (Pdeathsig, telling a live postmaster from a recycled
// pid through /proc) are Linux's. The package also builds on other Unix
// systems, where a postmaster can outlive a killed mzproxy and a stale
// postmaster.pid is left to PostgreSQL's own check. Windows is not supported.
//
// # Errors
//
// Start waits until a real connection (pgconn, as the superuser) succeeds,
// bounded by its context. When postgres exits or the context ends first, the
// error carries the tail of what this run wrote to postgres.log.
package embedded
