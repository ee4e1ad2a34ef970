package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// BinDirEnv names the environment variable that points at a directory
// holding the PostgreSQL server binaries (postgres and initdb).
const BinDirEnv = "MZPROXY_PG_BINDIR"

// ErrNoBinaries is wrapped by the error FindBinDir returns when it finds no
// PostgreSQL server binaries anywhere.
var ErrNoBinaries = errors.New("embedded: no PostgreSQL server binaries (postgres and initdb) found")

// installHint is the part of the not-found error that tells a user what to do.
const installHint = `Install the PostgreSQL server package:
  Debian/Ubuntu:  apt-get install postgresql
  Fedora/RHEL:    dnf install postgresql-server
  Alpine:         apk add postgresql
  Arch:           pacman -S postgresql
  macOS:          brew install postgresql
or pass the directory that holds postgres and initdb with --pg-bindir=DIR
or ` + BinDirEnv + `=DIR, or use an external PostgreSQL with --backend.`

// FindBinDir returns the directory of the PostgreSQL server binaries to run.
// It looks, in order, at explicit, $MZPROXY_PG_BINDIR, the first PATH entry
// that holds both postgres and initdb, `pg_config --bindir`, the newest
// /usr/lib/postgresql/*/bin, the newest /usr/pgsql-*/bin and
// /usr/local/pgsql/bin. A non-empty explicit or $MZPROXY_PG_BINDIR without the
// binaries is an error rather than a reason to keep looking: the user asked
// for that one.
func FindBinDir(explicit string) (string, error) {
	return defaultFinder().find(explicit)
}

// binFinder is FindBinDir with its environment made replaceable for tests.
type binFinder struct {
	getenv func(string) string
	// globs are tried in order after pg_config; within one glob the match
	// whose "*" part is the highest version wins.
	globs []string
}

func defaultFinder() binFinder {
	return binFinder{
		getenv: os.Getenv,
		globs: []string{
			"/usr/lib/postgresql/*/bin",
			"/usr/pgsql-*/bin",
			"/usr/local/pgsql/bin",
		},
	}
}

func (f binFinder) find(explicit string) (string, error) {
	if explicit != "" {
		if err := checkBinDir(explicit); err != nil {
			return "", fmt.Errorf("embedded: PostgreSQL bin dir %q (--pg-bindir): %w", explicit, err)
		}
		return explicit, nil
	}
	if dir := f.getenv(BinDirEnv); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("embedded: PostgreSQL bin dir %q ($%s): %w", dir, BinDirEnv, err)
		}
		return dir, nil
	}
	path := filepath.SplitList(f.getenv("PATH"))
	for _, dir := range path {
		if dir == "" {
			continue // an empty PATH entry means "."; never run binaries from the cwd
		}
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	if dir := pgConfigBinDir(path); dir != "" && checkBinDir(dir) == nil {
		return dir, nil
	}
	for _, g := range f.globs {
		if dir := newestBinDir(g); dir != "" {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w; looked at $%s (unset), PATH, `pg_config --bindir`, %s.\n%s",
		ErrNoBinaries, BinDirEnv, strings.Join(f.globs, ", "), installHint)
}

// checkBinDir reports why dir is not a PostgreSQL server bin dir, or nil.
func checkBinDir(dir string) error {
	var missing []string
	for _, name := range []string{"postgres", "initdb"} {
		if !isExecutable(filepath.Join(dir, name)) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no executable %s there", strings.Join(missing, " or "))
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// pgConfigBinDir runs the first pg_config found on path and returns what it
// says the bin dir is, or "" when there is no pg_config or it fails.
func pgConfigBinDir(path []string) string {
	for _, dir := range path {
		if dir == "" {
			continue
		}
		pgConfig := filepath.Join(dir, "pg_config")
		if !isExecutable(pgConfig) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	return ""
}

// newestBinDir returns the match of pattern (at most one "*") that is a bin
// dir and whose "*" part is the highest version, compared numerically
// (9.6 < 10 < 16), or "" when none is.
func newestBinDir(pattern string) string {
	matches, _ := filepath.Glob(pattern)
	prefix, suffix, _ := strings.Cut(pattern, "*")
	type cand struct {
		dir string
		ver []int
	}
	var cands []cand
	for _, m := range matches {
		ver := strings.TrimSuffix(strings.TrimPrefix(m, prefix), suffix)
		cands = append(cands, cand{m, parseVersion(ver)})
	}
	sort.SliceStable(cands, func(i, j int) bool { return compareVersions(cands[i].ver, cands[j].ver) > 0 })
	for _, c := range cands {
		if checkBinDir(c.dir) == nil {
			return c.dir
		}
	}
	return ""
}

// parseVersion turns "15", "9.6" or "17beta1" into numbers: [15], [9 6],
// [17]. Parsing stops at the first part that does not start with a digit.
func parseVersion(s string) []int {
	var v []int
	for _, part := range strings.Split(s, ".") {
		end := 0
		for end < len(part) && part[end] >= '0' && part[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(part[:end])
		if err != nil {
			break
		}
		v = append(v, n)
		if end < len(part) {
			break
		}
	}
	return v
}

func compareVersions(a, b []int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}
