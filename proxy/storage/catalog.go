package storage

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what the catalog and frontier readers need: a *pgx.Conn or a
// pgx.Tx (reading inside a transaction gives one consistent snapshot).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Kind is the kind of a managed object.
type Kind string

// The kinds of managed objects.
const (
	KindTable Kind = "table"
	KindView  Kind = "view"
)

// Column is one user column of a managed relation, in attnum order.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	// Type is the type as format_type spells it, schema-qualified when the
	// type is not in pg_catalog (e.g. "numeric(10,2)", "public.mood").
	Type    string
	NotNull bool
}

// Object is a live managed table or view.
type Object struct {
	ID     int64
	Kind   Kind
	OID    uint32 // pg_class.oid of the user relation
	Schema string
	Name   string
	// Columns of the user relation, in order.
	Columns []Column
	// History is the history relation of a table as a qualified, quoted
	// SQL name ready to paste into a query (e.g. `mzproxy.h12`); empty for
	// views. Its columns are the user's (by name) plus mz_from, mz_to and
	// mz_hash.
	History string
	// HistorySchema and HistoryName are History's parts, unquoted (for
	// callers that build names themselves, like the planner's
	// QualifiedName).
	HistorySchema, HistoryName string
	// ViewSQL is a view's definition (a SELECT with every name
	// schema-qualified, no trailing semicolon), deparsed when the catalog
	// was loaded; empty for tables.
	ViewSQL string
	// CreatedTS is the timestamp of the DDL that created the object.
	CreatedTS uint64
	// Revision is the catalog revision of the object's row's last change:
	// its creation, rename or move, a view's new text, its drop (since
	// version 52 not a column change, which moves only the catalog's
	// Revision).
	Revision int64
	// RowSecurity: row-level security is enabled on the table
	// (pg_class.relrowsecurity), which its history does not apply.
	RowSecurity bool
	// HistoryBuilt: the table's history relation exists. A table made
	// without rows gets it at its first write through mzproxy
	// (EnsureHistorySQL); until then it refuses writes. Always true for
	// views.
	HistoryBuilt bool
}

// Catalog is a snapshot of the managed objects.
type Catalog struct {
	// Revision is the catalog revision the snapshot was taken at.
	Revision int64
	Objects  []*Object
	byOID    map[uint32]*Object
	byID     map[int64]*Object
	byName   map[[2]string]*Object
}

// ByID returns the live object with catalog ID id, or nil.
func (c *Catalog) ByID(id int64) *Object { return c.byID[id] }

// ByOID returns the live object for a relation oid, or nil.
func (c *Catalog) ByOID(oid uint32) *Object { return c.byOID[oid] }

// ByName returns the live object schema.name, or nil.
func (c *Catalog) ByName(schema, name string) *Object { return c.byName[[2]string{schema, name}] }

// CatalogRevision returns the current catalog revision: a cheap check of
// whether a loaded Catalog is still current.
func CatalogRevision(ctx context.Context, q Querier) (int64, error) {
	var rev int64
	if err := q.QueryRow(ctx, CatalogRevisionSQL).Scan(&rev); err != nil {
		return 0, fmt.Errorf("storage: catalog revision: %w", err)
	}
	return rev, nil
}

// loadCatalogSQL deparses each view once (the CTE), not once per column.
const loadCatalogSQL = `
WITH k AS MATERIALIZED (
    SELECT id, kind, oid, schema_name, name, coalesce(history, '') AS history,
           CASE WHEN kind = 'view' THEN ` + Schema + `.view_definition(oid) ELSE '' END AS view_sql,
           created_ts, revision,
           coalesce((SELECT r.relrowsecurity FROM pg_class r WHERE r.oid = catalog.oid), false) AS rls,
           history_built
      FROM ` + Schema + `.catalog
     WHERE dropped_ts IS NULL
)
SELECT k.id, k.kind, k.oid, k.schema_name, k.name, k.history, k.view_sql, k.created_ts, k.revision,
       k.rls, k.history_built,
       a.attname, a.atttypid, a.atttypmod,
       ` + Schema + `.type_name(a.atttypid, a.atttypmod), a.attnotnull
  FROM k
  LEFT JOIN pg_attribute a ON a.attrelid = k.oid AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY k.id, a.attnum`

// LoadCatalog reads the revision and every live managed object. Run it in
// a transaction (q a pgx.Tx, REPEATABLE READ) for a snapshot in which the
// revision and the objects agree; outside one, a concurrent DDL may show
// up in the objects but not the revision, which errs on the safe side.
func LoadCatalog(ctx context.Context, q Querier) (*Catalog, error) {
	rev, err := CatalogRevision(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, loadCatalogSQL)
	if err != nil {
		return nil, fmt.Errorf("storage: load catalog: %w", err)
	}
	defer rows.Close()
	c := &Catalog{Revision: rev, byOID: map[uint32]*Object{}, byID: map[int64]*Object{}, byName: map[[2]string]*Object{}}
	var cur *Object
	for rows.Next() {
		var (
			o       Object
			created int64
			attname *string
			typoid  *uint32
			typmod  *int32
			typname *string
			notnull *bool
			kind    string
		)
		if err := rows.Scan(&o.ID, &kind, &o.OID, &o.Schema, &o.Name, &o.History, &o.ViewSQL,
			&created, &o.Revision, &o.RowSecurity, &o.HistoryBuilt, &attname, &typoid, &typmod, &typname, &notnull); err != nil {
			return nil, fmt.Errorf("storage: load catalog: %w", err)
		}
		if cur == nil || cur.ID != o.ID {
			o.Kind = Kind(kind)
			if o.History != "" {
				// Stored as Schema + "." + quote_ident('h' || id): both parts
				// are plain identifiers.
				o.HistorySchema, o.HistoryName = Schema, strings.TrimPrefix(o.History, Schema+".")
			}
			o.CreatedTS = uint64(created)
			cur = &o
			c.Objects = append(c.Objects, cur)
			c.byOID[cur.OID] = cur
			c.byID[cur.ID] = cur
			c.byName[[2]string{cur.Schema, cur.Name}] = cur
		}
		if attname != nil {
			cur.Columns = append(cur.Columns, Column{Name: *attname, TypeOID: *typoid, TypeMod: *typmod, Type: *typname, NotNull: *notnull})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: load catalog: %w", err)
	}
	return c, nil
}

// FrontierState is the shared upper and every live collection's since.
type FrontierState struct {
	// Upper is the transaction-log upper: every write at a time < Upper is
	// durable and final.
	Upper uint64
	// Since maps a managed table's catalog ID to its since.
	Since map[int64]uint64
}

const frontiersSQL = `
SELECT x.upper, c.id, c.since
  FROM (SELECT ` + Schema + `.upper() AS upper) x
  LEFT JOIN (` + Schema + `.collections c JOIN ` + Schema + `.catalog k ON k.id = c.id AND k.dropped_ts IS NULL) ON true`

// Frontiers reads the upper and each live collection's since in one query.
func Frontiers(ctx context.Context, q Querier) (*FrontierState, error) {
	rows, err := q.Query(ctx, frontiersSQL)
	if err != nil {
		return nil, fmt.Errorf("storage: frontiers: %w", err)
	}
	defer rows.Close()
	f := &FrontierState{Since: map[int64]uint64{}}
	for rows.Next() {
		var upper int64
		var id, since *int64
		if err := rows.Scan(&upper, &id, &since); err != nil {
			return nil, fmt.Errorf("storage: frontiers: %w", err)
		}
		f.Upper = uint64(upper)
		if id != nil {
			f.Since[*id] = uint64(*since)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: frontiers: %w", err)
	}
	return f, nil
}
