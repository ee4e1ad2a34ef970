package embedded

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTree is a directory of fake bin dirs. Every entry of bins names a
// dir (relative to the root) and the executables to put there.
func fakeTree(t *testing.T, bins map[string][]string) string {
	t.Helper()
	root := t.TempDir()
	for dir, names := range bins {
		full := filepath.Join(root, dir)
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			script := "#!/bin/sh\nexit 0\n"
			if name == "pg_config" {
				// Our fake pg_config points at the "pgconfig" dir of the tree.
				script = "#!/bin/sh\necho " + filepath.Join(root, "pgconfig") + "\n"
			}
			if err := os.WriteFile(filepath.Join(full, name), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestFindBinDir(t *testing.T) {
	both := []string{"postgres", "initdb"}
	for _, tc := range []struct {
		name     string
		bins     map[string][]string
		explicit string // relative to the tree
		env      string // $MZPROXY_PG_BINDIR, relative to the tree
		path     []string
		globs    []string
		want     string // relative to the tree; "" = error
		wantErr  string
	}{
		{
			name:     "explicit first",
			bins:     map[string][]string{"explicit": both, "env": both, "p": both},
			explicit: "explicit", env: "env", path: []string{"p"},
			want: "explicit",
		},
		{
			name:     "explicit without binaries is an error, not a fallthrough",
			bins:     map[string][]string{"explicit": {"postgres"}, "p": both},
			explicit: "explicit", path: []string{"p"},
			wantErr: "no executable initdb there",
		},
		{
			name: "env before PATH",
			bins: map[string][]string{"env": both, "p": both},
			env:  "env", path: []string{"p"},
			want: "env",
		},
		{
			name: "env without binaries is an error",
			bins: map[string][]string{"env": nil, "p": both},
			env:  "env", path: []string{"p"},
			wantErr: BinDirEnv,
		},
		{
			name: "first PATH dir holding both",
			bins: map[string][]string{"p1": {"postgres"}, "p2": {"initdb"}, "p3": both, "p4": both},
			path: []string{"p1", "p2", "p3", "p4"},
			want: "p3",
		},
		{
			name: "non-executable files do not count",
			bins: map[string][]string{"p1": both, "p2": both},
			path: []string{"p1", "p2"},
			want: "p2", // p1 is made non-executable below
		},
		{
			name: "pg_config after PATH",
			bins: map[string][]string{"p": {"pg_config"}, "pgconfig": both, "lib/15/bin": both},
			path: []string{"p"}, globs: []string{"lib/*/bin"},
			want: "pgconfig",
		},
		{
			name: "newest versioned dir, numerically",
			bins: map[string][]string{
				"lib/9.6/bin": both, "lib/10/bin": both, "lib/15/bin": both,
				"lib/16/bin": {"postgres"}, // not a full install
				"lib/2/bin":  both,
			},
			path: []string{"empty"}, globs: []string{"lib/*/bin"},
			want: "lib/15/bin",
		},
		{
			name:  "later globs only when earlier ones find nothing",
			bins:  map[string][]string{"pgsql-14/bin": both, "local/bin": both},
			globs: []string{"lib/*/bin", "pgsql-*/bin", "local/bin"},
			want:  "pgsql-14/bin",
		},
		{
			name: "nothing anywhere",
			bins: map[string][]string{"p": {"psql"}},
			path: []string{"p"}, globs: []string{"lib/*/bin"},
			wantErr: "apt-get install postgresql",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeTree(t, tc.bins)
			if tc.name == "non-executable files do not count" {
				if err := os.Chmod(filepath.Join(root, "p1", "initdb"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rel := func(p string) string {
				if p == "" {
					return ""
				}
				return filepath.Join(root, p)
			}
			var path []string
			for _, p := range tc.path {
				path = append(path, rel(p))
			}
			var globs []string
			for _, g := range tc.globs {
				globs = append(globs, rel(g))
			}
			env := map[string]string{
				BinDirEnv: rel(tc.env),
				"PATH":    strings.Join(path, string(os.PathListSeparator)),
			}
			f := binFinder{getenv: func(k string) string { return env[k] }, globs: globs}
			got, err := f.find(rel(tc.explicit))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("find = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != rel(tc.want) {
				t.Fatalf("find = %q, want %q", got, rel(tc.want))
			}
		})
	}
}

// TestNoBinariesError pins what a user without PostgreSQL is told.
func TestNoBinariesError(t *testing.T) {
	f := binFinder{getenv: func(string) string { return "" }, globs: []string{filepath.Join(t.TempDir(), "*", "bin")}}
	_, err := f.find("")
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{
		"apt-get install postgresql", // Debian/Ubuntu
		"dnf install postgresql-server",
		"apk add postgresql",
		"brew install postgresql",
		"--pg-bindir",
		BinDirEnv,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
