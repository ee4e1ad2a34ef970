package proxy

import "testing"

func TestSaysTemp(t *testing.T) {
	for sql, want := range map[string]bool{
		"CREATE TEMP TABLE t (v int)":               true,
		"create temporary table t (v int)":          true,
		"CREATE LOCAL TEMPORARY VIEW v AS SELECT 1": true,
		"SELECT * INTO TEMP t FROM u":               true,
		"CREATE TABLE pg_temp.t (v int)":            true,
		"SELECT * FROM PG_TEMP_3.t":                 true,
		"SET search_path = pg_temp, public":         true,
		"SELECT attempts, temperature FROM runs":    false,
		"SELECT * FROM template_temps":              false,
		"SELECT 1":                                  false,
		"SELECT temp_c FROM x":                      false,
	} {
		if got := saysTemp(sql); got != want {
			t.Errorf("saysTemp(%q) = %v, want %v", sql, got, want)
		}
	}
}
