package storage

import (
	"context"
	"testing"
)

// TestUpgradeToVersion45: after the upgrade from 44 an ordinary role may
// read writes_seen (the read guard reads it itself) but neither advance
// nor set it, nor the other sequences of the pin.
func TestUpgradeToVersion45(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 44)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzpeeker; CREATE ROLE mzpeeker"); err != nil {
		t.Fatal(err)
	}
	asPeeker := func(sql string) error {
		_, err := conn.Exec(ctx, "BEGIN; SET LOCAL ROLE mzpeeker; "+sql+"; ROLLBACK")
		if err != nil {
			conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // ends the failed block
		}
		return err
	}
	read := "SELECT last_value FROM " + Schema + ".writes_seen"
	wantCode(t, asPeeker(read), "42501", "reading writes_seen at version 44")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if err := asPeeker(read); err != nil {
		t.Errorf("reading writes_seen after the upgrade: %v", err)
	}
	for _, seq := range []string{"writes_seen", "writes", "pinned"} {
		wantCode(t, asPeeker("SELECT pg_catalog.nextval('"+Schema+"."+seq+"')"), "42501", "nextval of "+seq)
		wantCode(t, asPeeker("SELECT pg_catalog.setval('"+Schema+"."+seq+"', 1000000)"), "42501", "setval of "+seq)
	}
}
