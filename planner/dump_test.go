package planner

import (
	"strings"
	"testing"
)

func TestHideFromDump(t *testing.T) {
	view := DumpView{
		HiddenSchemas: []string{"mzproxy", "mz_internal"},
		Reloptions:    func(rel string) string { return "extra(" + rel + ".oid, " + rel + ".reloptions)" },
	}
	const hidden = "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname IN ('mzproxy', 'mz_internal')"
	cases := []struct {
		name, sql, want string // want "": forwarded as it is
	}{
		{"aliased, with reloptions",
			"SELECT c.oid, c.reloptions, tc.reloptions FROM pg_class c LEFT JOIN pg_catalog.pg_class tc ON tc.oid = c.reltoastrelid",
			"SELECT c.oid, extra(c.oid, c.reloptions), extra(tc.oid, tc.reloptions) FROM " +
				"(SELECT tableoid, * FROM pg_catalog.pg_class WHERE NOT relnamespace IN (" + hidden + ")) c LEFT JOIN " +
				"(SELECT tableoid, * FROM pg_catalog.pg_class WHERE NOT relnamespace IN (" + hidden + ")) tc ON tc.oid = c.reltoastrelid"},
		{"unaliased and qualified column",
			"SELECT pg_catalog.pg_namespace.nspname FROM pg_catalog.pg_namespace",
			"SELECT pg_namespace.nspname FROM (SELECT tableoid, * FROM pg_catalog.pg_namespace WHERE NOT oid IN (" + hidden + ")) pg_namespace"},
		{"in a subquery",
			"SELECT 1 WHERE EXISTS (SELECT FROM pg_event_trigger)",
			"SELECT 1 WHERE EXISTS (SELECT FROM (SELECT tableoid, * FROM pg_catalog.pg_event_trigger WHERE NOT evtfoid IN " +
				"(SELECT oid FROM pg_catalog.pg_proc WHERE pronamespace IN (" + hidden + "))) pg_event_trigger)"},
		{"another schema's table of the same name", "SELECT * FROM public.pg_class", ""},
		{"a catalog that hides nothing", "SELECT oid, rolname FROM pg_catalog.pg_roles ORDER BY 1", ""},
		{"not a SELECT", "LOCK TABLE public.pg_class", ""},
		{"several statements", "SELECT 1 FROM pg_class; SELECT 2", ""},
		{"does not parse", "SELECT FROM pg_class WHERE (", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := HideFromDump(c.sql, view)
			if c.want == "" {
				if ok || got != c.sql {
					t.Fatalf("rewrote %q to %q, want it unchanged", c.sql, got)
				}
				return
			}
			if !ok || got != c.want {
				t.Fatalf("HideFromDump(%q) =\n%q (%v), want\n%q", c.sql, got, ok, c.want)
			}
		})
	}
}

// The filter of every catalog parses. That they name the catalog's own
// columns is checked by running pg_dump, whose queries read every one of
// them, through the proxy (integration TestDumpRestore).
func TestHideFromDumpEveryCatalog(t *testing.T) {
	for name := range hiddenBy {
		got, ok := HideFromDump("SELECT oid FROM pg_catalog."+name+" x", DumpView{HiddenSchemas: []string{"s"}})
		if !ok || !strings.Contains(got, "FROM pg_catalog."+name+" WHERE ") {
			t.Errorf("%s: %q (%v)", name, got, ok)
		}
	}
}
