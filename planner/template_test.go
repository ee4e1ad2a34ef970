package planner

import "testing"

func TestWithTemplate(t *testing.T) {
	for _, c := range []struct{ in, out, name string }{
		{"CREATE DATABASE x", "CREATE DATABASE x TEMPLATE mzproxy_template", "x"},
		{"create database \"My Db\";", `create database "My Db" TEMPLATE mzproxy_template;`, "My Db"},
		{"CREATE DATABASE X WITH OWNER = bob ENCODING 'UTF8' -- comment", "CREATE DATABASE X WITH OWNER = bob ENCODING 'UTF8' TEMPLATE mzproxy_template -- comment", "x"},
		{"/* a */ CREATE DATABASE x /* b */ ; ", "/* a */ CREATE DATABASE x TEMPLATE mzproxy_template /* b */ ; ", "x"},
		{"CREATE DATABASE x TEMPLATE DEFAULT", "", ""},
		{"CREATE DATABASE x TEMPLATE template0", "", ""},
		{"CREATE DATABASE x WITH TEMPLATE = template1", "", ""},
		{"CREATE DATABASE x; CREATE DATABASE y", "", ""},
		{"CREATE TABLE x (a int)", "", ""},
		{"CREATE DATABASE", "", ""},
	} {
		got, name, ok := WithTemplate(c.in, "mzproxy_template")
		if ok != (c.out != "") || got != c.out || name != c.name {
			t.Errorf("WithTemplate(%q) = %q, %q, %v; want %q, %q", c.in, got, name, ok, c.out, c.name)
		}
	}
}

func TestDropDatabase(t *testing.T) {
	for _, c := range []struct {
		in    string
		name  string
		force bool
		ok    bool
	}{
		{"DROP DATABASE x", "x", false, true},
		{"drop database if exists \"My Db\" with (force);", "My Db", true, true},
		{"DROP DATABASE x (FORCE) -- c", "x", true, true},
		{"DROP DATABASE x; SELECT 1", "", false, false},
		{"DROP TABLE x", "", false, false},
		{"DROP DATABASE", "", false, false},
	} {
		name, force, ok := DropDatabase(c.in)
		if name != c.name || force != c.force || ok != c.ok {
			t.Errorf("DropDatabase(%q) = %q, %v, %v; want %q, %v, %v", c.in, name, force, ok, c.name, c.force, c.ok)
		}
	}
}
