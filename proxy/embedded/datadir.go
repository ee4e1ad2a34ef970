package embedded

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxSocketPath is the longest Unix socket path PostgreSQL accepts:
// sizeof(sockaddr_un.sun_path) is 108 on Linux, including the final NUL.
const maxSocketPath = 107

// identity is who initdb and postgres run as.
type identity struct {
	name     string
	uid, gid int
	groups   map[int]bool        // primary and supplementary
	cred     *syscall.Credential // nil: run as this process
}

// lookupIdentity returns the current user when not root, or runAs.
func lookupIdentity(runAs string) (identity, error) {
	if os.Geteuid() != 0 {
		id := identity{uid: os.Geteuid(), gid: os.Getegid(), groups: map[int]bool{os.Getegid(): true}}
		if u, err := user.LookupId(strconv.Itoa(id.uid)); err == nil {
			id.name = u.Username
		} else {
			id.name = strconv.Itoa(id.uid)
		}
		if gs, err := os.Getgroups(); err == nil {
			for _, g := range gs {
				id.groups[g] = true
			}
		}
		return id, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return identity{}, fmt.Errorf("embedded: running as root, so PostgreSQL must run as an unprivileged user, but user %q: %w (create it, e.g. `useradd --system %s`, or set another user)", runAs, err, runAs)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return identity{}, fmt.Errorf("embedded: user %q has non-numeric uid/gid %s/%s", runAs, u.Uid, u.Gid)
	}
	if uid == 0 {
		return identity{}, fmt.Errorf("embedded: PostgreSQL refuses to run as root, and user %q is uid 0; name an unprivileged user", runAs)
	}
	id := identity{name: runAs, uid: uid, gid: gid, groups: map[int]bool{gid: true}}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.Atoi(g); err == nil {
				id.groups[n] = true
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	id.cred = cred
	return id, nil
}

// prepareDataDir creates dataDir (0700; missing parents 0755) and, when
// root, hands it and the parents it created to id, and checks that id can
// reach it.
func prepareDataDir(dataDir string, id identity, chmodParents bool) error {
	var created []string
	for d := dataDir; ; {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("embedded: %w", err)
		}
		created = append(created, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return fmt.Errorf("embedded: creating data dir: %w", err)
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("embedded: creating data dir: %w", err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("embedded: data dir %s is not a directory", dataDir)
	}
	if id.cred == nil {
		return nil
	}
	for _, d := range append(created, dataDir) {
		if err := os.Chown(d, id.uid, id.gid); err != nil {
			return fmt.Errorf("embedded: handing data dir to %s: %w", id.name, err)
		}
	}
	return checkSearchable(filepath.Dir(dataDir), id, chmodParents)
}

// checkSearchable makes sure id may search dir and each of its ancestors,
// adding o+x where it may not if fix, else failing with what to do.
func checkSearchable(dir string, id identity, fix bool) error {
	var dirs []string
	for d := dir; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // from / down
		d := dirs[i]
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || searchable(fi.Mode(), int(st.Uid), int(st.Gid), id) {
			continue
		}
		if !fix {
			return fmt.Errorf("embedded: PostgreSQL runs as user %s, who cannot enter %s (mode %v, owner uid %d); `chmod o+x %s` or choose a data dir outside it, e.g. under /var/lib or /tmp",
				id.name, d, fi.Mode().Perm(), st.Uid, d)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("embedded: chmod o+x %s: %w", d, err)
		}
	}
	return nil
}

// searchable applies the Unix permission check for "x" (ACLs aside).
func searchable(mode os.FileMode, uid, gid int, id identity) bool {
	switch {
	case uid == id.uid:
		return mode&0o100 != 0
	case id.groups[gid]:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// lockRetry and lockPatience bound lockDataDir's wait for a lock that is
// being released.
const (
	lockRetry    = 50 * time.Millisecond
	lockPatience = time.Second
)

// lockDataDir takes the flock that says this process manages dataDir. The
// kernel drops it when the process dies, however it dies.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, "mzproxy.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	// A lock closed a moment ago can still be held: a child this process
	// forks keeps a copy of every descriptor until its exec closes the
	// close-on-exec ones, and the flock lives until the last copy goes. So
	// a refusal is tried again for a short while before it counts.
	for wait := time.Duration(0); ; wait += lockRetry {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || wait >= lockPatience {
			break
		}
		time.Sleep(lockRetry)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrDataDirInUse, path)
		}
		return nil, fmt.Errorf("embedded: locking %s: %w", path, err)
	}
	// For people looking at the directory; the flock is what counts.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// socketDir is DataDir/sock, or /tmp/mzproxy-<hash> when the socket path
// in DataDir would be too long.
func socketDir(dataDir string, port int) (dir string, tmp bool) {
	suffix := len("/.s.PGSQL.") + len(strconv.Itoa(port))
	dir = filepath.Join(dataDir, "sock")
	if len(dir)+suffix <= maxSocketPath {
		return dir, false
	}
	sum := sha256.Sum256([]byte(dataDir))
	return "/tmp/mzproxy-" + hex.EncodeToString(sum[:6]), true
}

// makeSocketDir creates dir 0700 for id. A /tmp dir that already exists must
// be a real directory of ours: /tmp is shared with everyone.
func makeSocketDir(dir string, tmp bool, id identity) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("embedded: creating socket dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil {
		return fmt.Errorf("embedded: socket dir %s is not a directory", dir)
	}
	if tmp && int(st.Uid) != id.uid && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("embedded: socket dir %s belongs to uid %d, not to us; remove it", dir, st.Uid)
	}
	if id.cred != nil {
		if err := os.Chown(dir, id.uid, id.gid); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	return nil
}

// clearLeftovers deals with what an earlier run left in the data dir. It
// runs with the data dir's flock held, so no live Server manages any
// postgres process working there: such processes are leftovers and are
// stopped, and lock files that would stop postgres from starting go.
func (s *Server) clearLeftovers(ctx context.Context) error {
	if !canJudgePids {
		return nil // postgres's own check decides
	}
	pidFile := filepath.Join(s.pgData, "postmaster.pid")
	sockName := filepath.Join(s.sockDir, ".s.PGSQL."+strconv.Itoa(s.port))

	// A postmaster whose mzproxy died without taking it along.
	for _, path := range []string{pidFile, sockName + ".lock"} {
		if pid, err := readLockPid(path); err == nil && isPostgresFor(pid, s.pgData) {
			s.log.WithField("pid", pid).Warn("a postmaster of an earlier run still serves this data dir; stopping it")
			if err := stopLeftover(ctx, pid, s.pgData, postmasterSteps); err != nil {
				return err
			}
		}
	}
	// Backends orphaned by a postmaster that was SIGKILLed: one busy in a
	// long query notices only when it next waits, and must not write to the
	// data dir next to a new postmaster.
	for _, pid := range postgresIn(s.pgData) {
		s.log.WithField("pid", pid).Warn("a backend of an earlier run still works in this data dir; stopping it")
		if err := stopLeftover(ctx, pid, s.pgData, orphanSteps); err != nil {
			return err
		}
	}

	// A postmaster.pid naming a dead process is left to postgres: it removes
	// the file itself after checking that nothing still has the old shared
	// memory attached. One naming a live process (a recycled pid, now
	// someone else's) or nothing readable would make postgres refuse to
	// start: it goes.
	if pid, err := readLockPid(pidFile); err == nil && (pid == 0 || !processGone(pid)) && !isPostgresFor(pid, s.pgData) {
		s.log.WithField("file", pidFile).Info("removing a stale postmaster.pid")
		if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("embedded: removing stale %s: %w", pidFile, err)
		}
	}
	// The socket's lock file guards nothing postgres does not re-check, and
	// the socket dir is ours alone.
	if pid, err := readLockPid(sockName + ".lock"); err == nil && !isPostgresFor(pid, s.pgData) {
		s.log.WithField("file", sockName+".lock").Info("removing a stale socket lock file")
		if err := os.Remove(sockName + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("embedded: removing stale %s: %w", sockName+".lock", err)
		}
		_ = os.Remove(sockName)
	}
	return nil
}

// readLockPid reads the pid on the first line of a PostgreSQL lock file.
// A file without one (torn write) reads as pid 0, which is never ours.
func readLockPid(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, nil
	}
	if pid < 0 { // a negative pid marks a standalone backend
		pid = -pid
	}
	return pid, nil
}

type stopStep struct {
	sig  syscall.Signal
	wait time.Duration
}

var (
	// A postmaster: fast shutdown, then immediate, then kill.
	postmasterSteps = []stopStep{
		{syscall.SIGINT, 10 * time.Second},
		{syscall.SIGQUIT, 5 * time.Second},
		{syscall.SIGKILL, 5 * time.Second},
	}
	// A backend without a postmaster: SIGQUIT makes it exit at once.
	orphanSteps = []stopStep{
		{syscall.SIGQUIT, 2 * time.Second},
		{syscall.SIGKILL, 5 * time.Second},
	}
)

// stopLeftover stops a postgres process that is not our child, signal by
// signal, re-checking before each that the pid still is a postgres process
// in pgData (pids get recycled).
func stopLeftover(ctx context.Context, pid int, pgData string, steps []stopStep) error {
	for _, step := range steps {
		if !isPostgresFor(pid, pgData) {
			return nil
		}
		if err := syscall.Kill(pid, step.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("embedded: a postgres process of an earlier run (pid %d) still works in %s and cannot be stopped: %w", pid, pgData, err)
		}
		if waitGone(ctx, pid, step.wait) {
			return nil
		}
	}
	return fmt.Errorf("embedded: a postgres process of an earlier run (pid %d) still works in %s and survived SIGKILL", pid, pgData)
}

// waitGone polls until pid is gone, d has passed or ctx has ended.
func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if processGone(pid) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
