package integration

import (
	"path/filepath"
	"testing"
)

// TestAsyncpgUnsyncedPrepare: asyncpg's prepare is Parse, Describe and
// Flush, with no Sync, so the backend stays in that batch's implicit
// transaction, whose snapshot the Parse of a SELECT has taken; the next
// BEGIN (a simple Query) turned that transaction into the block, and the
// read-only transaction's SET TRANSACTION ISOLATION LEVEL REPEATABLE READ
// at its first read failed with 25001. Each case prepares outside a
// transaction, then reads inside one with a cursor and with a statement
// prepared earlier, and checks that mz_now() stays the transaction's
// (testdata/python/asyncpg_unsynced.py).
func TestAsyncpgUnsyncedPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("driver programs (Python imports) are slow; skipped with -short")
	}
	t.Parallel()
	command, err := pythonModule("asyncpg")()
	requireDriver(t, err, "apt-get install -y python3-asyncpg")
	p := startProxy(t)
	ctx := testContext(t)
	host, port := p.hostPort()
	results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, command[0], "asyncpg_unsynced.py", libpqURL(host, port, freshDatabase(t, ctx)), tableName(t))
	for _, name := range []string{"dropped_mz_now_statement", "kept_statement"} {
		failure, ran := results[name]
		switch {
		case !ran:
			t.Errorf("case %s was not reported", name)
		case failure != "":
			t.Errorf("%s: %s", name, failure)
		}
	}
}
