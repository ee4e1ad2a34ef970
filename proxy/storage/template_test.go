package storage

import (
	"context"
	"strings"
	"testing"
)

// TestTemplateCopyReseeds: a database that InstallTemplate marked (as a
// copy of the template database is) gets every install-time value
// afresh at its next Install, and loses the mark; without the mark,
// Install changes nothing.
func TestTemplateCopyReseeds(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, newDB(t))
	if err := InstallTemplate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	read := func() (values map[string]string, marked bool) {
		values = map[string]string{}
		for _, v := range installTimeValues {
			sql := "SELECT last_value::text FROM " + Schema + "." + v.key
			if table, column, ok := strings.Cut(v.key, "."); ok {
				sql = "SELECT string_agg(" + column + "::text, ',') FROM " + Schema + "." + table
			}
			var s string
			if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			values[v.key] = s
		}
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", TemplateMarker).Scan(&marked); err != nil {
			t.Fatal(err)
		}
		return values, marked
	}
	template, marked := read()
	if !marked {
		t.Fatal("InstallTemplate left no mark")
	}
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	copied, marked := read()
	if marked {
		t.Error("Install left the mark of a copy")
	}
	for _, v := range installTimeValues {
		if copied[v.key] == template[v.key] {
			t.Errorf("%s: %s in the template and in its copy", v.key, copied[v.key])
		}
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if again, _ := read(); again["write_key.k"] != copied["write_key.k"] {
		t.Error("Install of an unmarked database computed its values again")
	}
}
