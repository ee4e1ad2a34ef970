package planner

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// fakeCatalog is an in-memory Catalog for tests.
type fakeCatalog struct {
	objs     map[QualifiedName]*Object
	nextID   uint64
	revision atomic.Uint64
	lookups  atomic.Uint64
}

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{objs: map[QualifiedName]*Object{}, nextID: 1}
}

func (c *fakeCatalog) Lookup(schema, name string, searchPath []string) (*Object, bool) {
	c.lookups.Add(1)
	if schema != "" {
		o, ok := c.objs[QualifiedName{schema, name}]
		return o, ok
	}
	for _, s := range EffectiveSearchPath(searchPath, "") {
		if s == "pg_catalog" {
			if _, sys := systemRelations[name]; sys {
				return nil, false
			}
			continue
		}
		if o, ok := c.objs[QualifiedName{s, name}]; ok {
			return o, true
		}
	}
	return nil, false
}

func (c *fakeCatalog) Revision() uint64 { return c.revision.Load() }

func (c *fakeCatalog) addTable(schema, name string, cols ...string) *Object {
	o := &Object{ID: c.nextID, Schema: schema, Name: name, Kind: Table, Columns: cols,
		History: QualifiedName{"mzproxy", fmt.Sprintf("h%d", c.nextID)}}
	c.nextID++
	c.objs[QualifiedName{schema, name}] = o
	c.revision.Add(1)
	return o
}

func (c *fakeCatalog) addView(schema, name, sql string, cols ...string) *Object {
	o := &Object{ID: c.nextID, Schema: schema, Name: name, Kind: View, Columns: cols, ViewSQL: sql}
	c.nextID++
	c.objs[QualifiedName{schema, name}] = o
	c.revision.Add(1)
	return o
}

func (c *fakeCatalog) drop(schema, name string) {
	delete(c.objs, QualifiedName{schema, name})
	c.revision.Add(1)
}

// define runs catalog commands, one a line:
//
//	table schema.name col|col|...      (columns may contain spaces)
//	view schema.name col|col|... AS <sql>
//	drop schema.name
func (c *fakeCatalog) define(input string) error {
	for _, line := range strings.Split(input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		qn, rest, _ := strings.Cut(rest, " ")
		colText, viewSQL, isView := strings.Cut(rest, " AS ")
		sch, name, _ := strings.Cut(qn, ".")
		var cols []string
		if colText != "" && colText != "-" {
			cols = strings.Split(colText, "|")
		}
		f := []string{verb}
		_ = isView
		switch f[0] {
		case "table":
			c.addTable(sch, name, cols...)
		case "view":
			if !isView {
				return fmt.Errorf("bad view line %q", line)
			}
			c.addView(sch, name, viewSQL, cols...)
		case "drop":
			c.drop(sch, name)
		default:
			return fmt.Errorf("unknown catalog command %q", f[0])
		}
	}
	return nil
}
