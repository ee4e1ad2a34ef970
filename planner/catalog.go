package planner

import "slices"

// Catalog is the snapshot of managed objects a statement is planned
// against. The proxy implements it; planner never does I/O through it.
type Catalog interface {
	// Lookup resolves a name as PostgreSQL would for a session with the
	// given search_path (schema "" = unqualified). ok=false: not a managed
	// object (unmanaged table, temp, system, or unknown).
	Lookup(schema, name string, searchPath []string) (obj *Object, ok bool)
	// Revision changes whenever any object changes.
	Revision() uint64
}

// ObjectKind is the kind of a managed object.
type ObjectKind int

const (
	Table ObjectKind = iota
	View
)

func (k ObjectKind) String() string {
	if k == View {
		return "view"
	}
	return "table"
}

// QualifiedName is a schema-qualified relation name; Schema may be "".
type QualifiedName struct {
	Schema, Name string
}

func (q QualifiedName) String() string {
	if q.Schema == "" {
		return quoteIdent(q.Name)
	}
	return quoteIdent(q.Schema) + "." + quoteIdent(q.Name)
}

// Object is a managed table or view.
type Object struct {
	ID           uint64
	Schema, Name string
	Kind         ObjectKind
	Columns      []string      // user column names in order (tables); for views, output names
	History      QualifiedName // history relation for tables, e.g. {"mzproxy", "h17"}
	// ViewSQL is the view's definition as pg_get_viewdef returns it. Its
	// unqualified names are resolved with the reading session's
	// search_path, so the proxy should capture it with a search_path
	// under which pg_get_viewdef qualifies every name (e.g. only
	// pg_catalog).
	ViewSQL string
	// RowSecurity: row-level security is enabled on the table. Its
	// history has no policies, so a read at a timestamp is refused.
	RowSecurity bool
}

// sameDefinition reports whether a cached plan made against o is still
// valid against p.
func (o *Object) sameDefinition(p *Object) bool {
	return o.ID == p.ID && o.Schema == p.Schema && o.Name == p.Name && o.Kind == p.Kind &&
		o.History == p.History && o.ViewSQL == p.ViewSQL && o.RowSecurity == p.RowSecurity &&
		slices.Equal(o.Columns, p.Columns)
}

// Ref is a relation a statement reads or writes, as written (Schema ""
// when unqualified), with the managed object it resolved to (nil when
// unmanaged).
type Ref struct {
	Schema, Name string
	Object       *Object
}

// Managed reports whether the reference is to a managed object.
func (r Ref) Managed() bool { return r.Object != nil }

// EffectiveSearchPath turns a session's search_path setting into the list
// of schemas PostgreSQL searches for a relation, in order: "$user" becomes
// user (dropped when user is ""), pg_catalog comes first unless listed
// explicitly, and pg_temp (the session's temporary schema) before it
// unless listed explicitly. The catalog decides what pg_temp holds: its
// temporary relations shadow managed objects of the same name there.
// Catalog implementations may use it.
func EffectiveSearchPath(searchPath []string, user string) []string {
	out := make([]string, 0, len(searchPath)+2)
	if !slices.Contains(searchPath, "pg_temp") {
		out = append(out, "pg_temp")
	}
	if !slices.Contains(searchPath, "pg_catalog") {
		out = append(out, "pg_catalog")
	}
	for _, s := range searchPath {
		switch s {
		case "$user":
			if user != "" {
				out = append(out, user)
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// isSystemRelation reports whether an unqualified name resolves to a
// pg_catalog relation under searchPath: it names a system relation and
// pg_catalog is searched before every other schema (implicitly first or
// listed first).
func isSystemRelation(name string, searchPath []string) bool {
	if _, ok := systemRelations[name]; !ok {
		return false
	}
	if !slices.Contains(searchPath, "pg_catalog") {
		return true
	}
	for _, s := range searchPath {
		if s != "pg_temp" {
			return s == "pg_catalog"
		}
	}
	return true
}

// quoteIdent quotes an identifier when PostgreSQL would need it (as
// quote_ident does: unless it is lower case and not a reserved word).
func quoteIdent(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')
	}
	if plain {
		if toks, err := scanTokens(s); err == nil && len(toks) == 1 && (!toks[0].keyword || toks[0].unreserved) {
			return s
		}
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}
