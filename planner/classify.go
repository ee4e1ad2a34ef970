package planner

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Kind is what a statement does, as far as the proxy's sequencing cares.
type Kind int

const (
	KindPassThrough      Kind = iota // anything else: DO, CALL, LOCK, DISCARD, LOAD, CHECKPOINT, ...
	KindRead                         // SELECT, TABLE, VALUES
	KindExplain                      // EXPLAIN <statement> (see Inner)
	KindExplainTimestamp             // EXPLAIN TIMESTAMP ... FOR <select>
	KindWrite                        // INSERT, UPDATE, DELETE, MERGE, COPY FROM, TRUNCATE
	KindCopyTo                       // COPY ... TO
	KindDDL                          // CREATE/ALTER/DROP ..., COMMENT, GRANT/REVOKE, CREATE TABLE AS, SELECT INTO
	KindMaintenance                  // VACUUM, ANALYZE, REINDEX, CLUSTER
	KindTransaction                  // BEGIN, COMMIT, ROLLBACK, SAVEPOINT, ... (see Txn)
	KindSet                          // SET, SET TRANSACTION, SET SESSION CHARACTERISTICS (see Var)
	KindShow                         // SHOW (see Var)
	KindReset                        // RESET (see Var)
	KindSubscribe                    // SUBSCRIBE (see Subscribe)
	KindCursor                       // DECLARE, FETCH, MOVE, CLOSE (see Cursor)
	KindPrepare                      // PREPARE name AS ... (see Inner)
	KindExecute                      // EXECUTE name
	KindDeallocate                   // DEALLOCATE
	KindListen                       // LISTEN
	KindNotify                       // NOTIFY
	KindUnlisten                     // UNLISTEN
)

var kindNames = [...]string{
	KindPassThrough: "passthrough", KindRead: "read", KindExplain: "explain",
	KindExplainTimestamp: "explain-timestamp", KindWrite: "write", KindCopyTo: "copy-to",
	KindDDL: "ddl", KindMaintenance: "maintenance", KindTransaction: "transaction",
	KindSet: "set", KindShow: "show", KindReset: "reset", KindSubscribe: "subscribe",
	KindCursor: "cursor", KindPrepare: "prepare", KindExecute: "execute",
	KindDeallocate: "deallocate", KindListen: "listen", KindNotify: "notify", KindUnlisten: "unlisten",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// TxnKind is the sub-kind of a transaction-control statement.
type TxnKind int

const (
	TxnBegin    TxnKind = iota // BEGIN, START TRANSACTION
	TxnCommit                  // COMMIT, END
	TxnRollback                // ROLLBACK, ABORT
	TxnSavepoint
	TxnRelease
	TxnRollbackTo
	TxnPrepare // PREPARE TRANSACTION
	TxnCommitPrepared
	TxnRollbackPrepared
)

var txnNames = [...]string{"begin", "commit", "rollback", "savepoint", "release", "rollback-to",
	"prepare", "commit-prepared", "rollback-prepared"}

func (k TxnKind) String() string { return txnNames[k] }

// TxnOptions are the characteristics given by BEGIN/START TRANSACTION, SET
// TRANSACTION or SET SESSION CHARACTERISTICS. Empty/nil means "not given".
type TxnOptions struct {
	Isolation  string // lower-case: "serializable", "repeatable read", "read committed", "read uncommitted", "strict serializable"
	ReadOnly   *bool
	Deferrable *bool
}

// Transaction describes a transaction-control statement.
type Transaction struct {
	Kind      TxnKind
	Options   TxnOptions
	Savepoint string // SAVEPOINT, RELEASE, ROLLBACK TO
	GID       string // PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED
	Chain     bool   // COMMIT/ROLLBACK AND CHAIN
}

// Ends reports whether the statement is COMMIT or ROLLBACK (END, ABORT):
// it ends the transaction block, AND CHAIN or not.
func (t *Transaction) Ends() bool {
	return t.Kind == TxnCommit || t.Kind == TxnRollback
}

// Var describes SET, SHOW and RESET.
type Var struct {
	Name    string   // lower-cased; "all" for SHOW ALL / RESET ALL; "transaction" / "session characteristics" for SET TRANSACTION / SET SESSION CHARACTERISTICS
	Values  []string // SET values as strings (constants unquoted), nil for DEFAULT
	Default bool     // SET x TO DEFAULT
	Local   bool     // SET LOCAL
	// Txn holds SET TRANSACTION / SET SESSION CHARACTERISTICS options.
	Txn *TxnOptions
}

// Cursor describes DECLARE, FETCH, MOVE and CLOSE.
type Cursor struct {
	Name    string // "" for CLOSE ALL
	Declare bool
	Move    bool
	Close   bool
	Hold    bool // DECLARE ... WITH HOLD
}

// classify sets st.Kind, st.Tag and the kind's details from the parsed
// statement. Inner statements (EXPLAIN, DECLARE, PREPARE) are classified by
// the caller.
func classify(st *Statement, n *pg.Node) {
	st.Kind, st.Tag = KindPassThrough, ""
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		if hasInto(x.SelectStmt) {
			st.Kind, st.Tag = KindDDL, "SELECT"
		} else {
			st.Kind, st.Tag = KindRead, "SELECT"
		}
	case *pg.Node_InsertStmt:
		st.Kind, st.Tag = KindWrite, "INSERT"
	case *pg.Node_UpdateStmt:
		st.Kind, st.Tag = KindWrite, "UPDATE"
	case *pg.Node_DeleteStmt:
		st.Kind, st.Tag = KindWrite, "DELETE"
	case *pg.Node_MergeStmt:
		st.Kind, st.Tag = KindWrite, "MERGE"
	case *pg.Node_TruncateStmt:
		st.Kind, st.Tag = KindWrite, "TRUNCATE TABLE"
	case *pg.Node_CopyStmt:
		st.Tag = "COPY"
		if x.CopyStmt.IsFrom {
			st.Kind = KindWrite
			st.CopyFromStdin = x.CopyStmt.Filename == "" && !x.CopyStmt.IsProgram
		} else {
			st.Kind = KindCopyTo
		}
	case *pg.Node_ExplainStmt:
		st.Kind, st.Tag = KindExplain, "EXPLAIN"
	case *pg.Node_TransactionStmt:
		st.Kind = KindTransaction
		st.Txn, st.Tag = transaction(x.TransactionStmt)
	case *pg.Node_VariableSetStmt:
		classifySet(st, x.VariableSetStmt)
	case *pg.Node_VariableShowStmt:
		st.Kind, st.Tag = KindShow, "SHOW"
		st.Var = &Var{Name: strings.ToLower(x.VariableShowStmt.Name)}
	case *pg.Node_DeclareCursorStmt:
		st.Kind, st.Tag = KindCursor, "DECLARE CURSOR"
		st.Cursor = &Cursor{Name: x.DeclareCursorStmt.Portalname, Declare: true,
			Hold: x.DeclareCursorStmt.Options&0x0020 != 0} // CURSOR_OPT_HOLD
	case *pg.Node_FetchStmt:
		st.Kind, st.Tag = KindCursor, "FETCH"
		st.Cursor = &Cursor{Name: x.FetchStmt.Portalname, Move: x.FetchStmt.Ismove}
		if x.FetchStmt.Ismove {
			st.Tag = "MOVE"
		}
	case *pg.Node_ClosePortalStmt:
		st.Kind, st.Tag = KindCursor, "CLOSE CURSOR"
		st.Cursor = &Cursor{Name: x.ClosePortalStmt.Portalname, Close: true}
		if x.ClosePortalStmt.Portalname == "" {
			st.Tag = "CLOSE CURSOR ALL"
		}
	case *pg.Node_PrepareStmt:
		st.Kind, st.Tag = KindPrepare, "PREPARE"
	case *pg.Node_ExecuteStmt:
		st.Kind, st.Tag = KindExecute, "EXECUTE"
	case *pg.Node_DeallocateStmt:
		st.Kind, st.Tag = KindDeallocate, "DEALLOCATE"
		st.Deallocate = x.DeallocateStmt.Name
		if x.DeallocateStmt.Isall {
			st.Tag = "DEALLOCATE ALL"
		}
	case *pg.Node_ListenStmt:
		st.Kind, st.Tag = KindListen, "LISTEN"
	case *pg.Node_NotifyStmt:
		st.Kind, st.Tag = KindNotify, "NOTIFY"
	case *pg.Node_UnlistenStmt:
		st.Kind, st.Tag = KindUnlisten, "UNLISTEN"
	case *pg.Node_VacuumStmt:
		st.Kind, st.Tag = KindMaintenance, "VACUUM"
		if !x.VacuumStmt.IsVacuumcmd {
			st.Tag = "ANALYZE"
		}
	case *pg.Node_ReindexStmt:
		st.Kind, st.Tag = KindMaintenance, "REINDEX"
	case *pg.Node_ClusterStmt:
		st.Kind, st.Tag = KindMaintenance, "CLUSTER"
	case *pg.Node_CreateTableAsStmt:
		st.Kind, st.Tag = KindDDL, "SELECT"
		if x.CreateTableAsStmt.Objtype == pg.ObjectType_OBJECT_MATVIEW {
			st.Tag = "CREATE MATERIALIZED VIEW"
		}
	default:
		if tag, ok := ddlTag(n); ok {
			st.Kind, st.Tag = KindDDL, tag
			st.CatalogNeutral = catalogNeutral(n)
		} else {
			st.Tag = passThroughTag(n)
		}
	}
}

func hasInto(s *pg.SelectStmt) bool {
	for s != nil {
		if s.IntoClause != nil {
			return true
		}
		// SELECT ... INTO inside the first arm of a set operation.
		s = s.Larg
	}
	return false
}

func transaction(t *pg.TransactionStmt) (*Transaction, string) {
	tx := &Transaction{Savepoint: t.SavepointName, GID: t.Gid, Chain: t.Chain}
	var tag string
	switch t.Kind {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN:
		tx.Kind, tag = TxnBegin, "BEGIN"
	case pg.TransactionStmtKind_TRANS_STMT_START:
		tx.Kind, tag = TxnBegin, "START TRANSACTION"
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		tx.Kind, tag = TxnCommit, "COMMIT"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		tx.Kind, tag = TxnRollback, "ROLLBACK"
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		tx.Kind, tag = TxnSavepoint, "SAVEPOINT"
	case pg.TransactionStmtKind_TRANS_STMT_RELEASE:
		tx.Kind, tag = TxnRelease, "RELEASE"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		tx.Kind, tag = TxnRollbackTo, "ROLLBACK"
	case pg.TransactionStmtKind_TRANS_STMT_PREPARE:
		tx.Kind, tag = TxnPrepare, "PREPARE TRANSACTION"
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		tx.Kind, tag = TxnCommitPrepared, "COMMIT PREPARED"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		tx.Kind, tag = TxnRollbackPrepared, "ROLLBACK PREPARED"
	}
	tx.Options = txnOptions(t.Options)
	return tx, tag
}

// txnOptions reads transaction_isolation / transaction_read_only /
// transaction_deferrable DefElems.
func txnOptions(opts []*pg.Node) TxnOptions {
	var o TxnOptions
	for _, n := range opts {
		d := n.GetDefElem()
		if d == nil {
			continue
		}
		c := d.Arg.GetAConst()
		switch d.Defname {
		case "transaction_isolation":
			if c != nil {
				o.Isolation = strings.ToLower(c.GetSval().GetSval())
			}
		case "transaction_read_only":
			b := constBool(c)
			o.ReadOnly = &b
		case "transaction_deferrable":
			b := constBool(c)
			o.Deferrable = &b
		}
	}
	return o
}

func constBool(c *pg.A_Const) bool {
	if c == nil {
		return false
	}
	if iv := c.GetIval(); iv != nil {
		return iv.Ival != 0
	}
	if bv := c.GetBoolval(); bv != nil {
		return bv.Boolval
	}
	return false
}

func classifySet(st *Statement, s *pg.VariableSetStmt) {
	v := &Var{Name: strings.ToLower(s.Name), Local: s.IsLocal}
	st.Var = v
	switch s.Kind {
	case pg.VariableSetKind_VAR_RESET:
		st.Kind, st.Tag = KindReset, "RESET"
		return
	case pg.VariableSetKind_VAR_RESET_ALL:
		st.Kind, st.Tag = KindReset, "RESET"
		v.Name = "all"
		return
	}
	st.Kind, st.Tag = KindSet, "SET"
	switch s.Kind {
	case pg.VariableSetKind_VAR_SET_DEFAULT:
		v.Default = true
	case pg.VariableSetKind_VAR_SET_MULTI:
		o := txnOptions(s.Args)
		v.Txn = &o
	case pg.VariableSetKind_VAR_SET_VALUE:
		for _, a := range s.Args {
			v.Values = append(v.Values, constString(a))
		}
	}
}

// constString renders a SET value: constants without quotes, anything else
// (e.g. INTERVAL '1' HOUR) deparsed.
func constString(n *pg.Node) string {
	if c := n.GetAConst(); c != nil {
		switch {
		case c.GetSval() != nil:
			return c.GetSval().Sval
		case c.GetIval() != nil:
			return strconv.FormatInt(int64(c.GetIval().Ival), 10)
		case c.GetFval() != nil:
			return c.GetFval().Fval
		case c.GetBoolval() != nil:
			if c.GetBoolval().Boolval {
				return "on"
			}
			return "off"
		case c.Isnull:
			return ""
		}
	}
	if tc := n.GetTypeCast(); tc != nil && tc.Arg != nil {
		return constString(tc.Arg)
	}
	return ""
}

// objectTypeName is the object type as PostgreSQL's command tags spell it.
func objectTypeName(t pg.ObjectType) string {
	switch t {
	case pg.ObjectType_OBJECT_MATVIEW:
		return "MATERIALIZED VIEW"
	case pg.ObjectType_OBJECT_FDW:
		return "FOREIGN DATA WRAPPER"
	case pg.ObjectType_OBJECT_FOREIGN_SERVER:
		return "SERVER"
	case pg.ObjectType_OBJECT_TSCONFIGURATION:
		return "TEXT SEARCH CONFIGURATION"
	case pg.ObjectType_OBJECT_TSDICTIONARY:
		return "TEXT SEARCH DICTIONARY"
	case pg.ObjectType_OBJECT_TSPARSER:
		return "TEXT SEARCH PARSER"
	case pg.ObjectType_OBJECT_TSTEMPLATE:
		return "TEXT SEARCH TEMPLATE"
	case pg.ObjectType_OBJECT_OPCLASS:
		return "OPERATOR CLASS"
	case pg.ObjectType_OBJECT_OPFAMILY:
		return "OPERATOR FAMILY"
	case pg.ObjectType_OBJECT_STATISTIC_EXT:
		return "STATISTICS"
	case pg.ObjectType_OBJECT_LARGEOBJECT:
		return "LARGE OBJECT"
	case pg.ObjectType_OBJECT_DOMCONSTRAINT, pg.ObjectType_OBJECT_TABCONSTRAINT:
		return "CONSTRAINT"
	}
	return strings.ReplaceAll(strings.TrimPrefix(t.String(), "OBJECT_"), "_", " ")
}

// catalogNeutral reports whether DDL n is Statement.CatalogNeutral.
func catalogNeutral(n *pg.Node) bool {
	switch x := n.Node.(type) {
	case *pg.Node_IndexStmt:
		return !x.IndexStmt.Unique
	case *pg.Node_DropStmt:
		return x.DropStmt.RemoveType == pg.ObjectType_OBJECT_INDEX
	}
	return false
}

// ddlTag returns the command tag of a DDL statement (CREATE, ALTER, DROP,
// COMMENT, GRANT, ...), and false if n is not DDL.
func ddlTag(n *pg.Node) (string, bool) {
	switch x := n.Node.(type) {
	case *pg.Node_CreateStmt:
		return "CREATE TABLE", true
	case *pg.Node_ViewStmt:
		return "CREATE VIEW", true
	case *pg.Node_IndexStmt:
		return "CREATE INDEX", true
	case *pg.Node_CreateSchemaStmt:
		return "CREATE SCHEMA", true
	case *pg.Node_CreateSeqStmt:
		return "CREATE SEQUENCE", true
	case *pg.Node_AlterSeqStmt:
		return "ALTER SEQUENCE", true
	case *pg.Node_CreateFunctionStmt:
		if x.CreateFunctionStmt.IsProcedure {
			return "CREATE PROCEDURE", true
		}
		return "CREATE FUNCTION", true
	case *pg.Node_AlterFunctionStmt:
		return "ALTER " + objectTypeName(x.AlterFunctionStmt.Objtype), true
	case *pg.Node_DropStmt:
		return "DROP " + objectTypeName(x.DropStmt.RemoveType), true
	case *pg.Node_AlterTableStmt:
		return "ALTER " + objectTypeName(x.AlterTableStmt.Objtype), true
	case *pg.Node_RenameStmt:
		return "ALTER " + objectTypeName(x.RenameStmt.RenameType), true
	case *pg.Node_AlterObjectSchemaStmt:
		return "ALTER " + objectTypeName(x.AlterObjectSchemaStmt.ObjectType), true
	case *pg.Node_AlterOwnerStmt:
		return "ALTER " + objectTypeName(x.AlterOwnerStmt.ObjectType), true
	case *pg.Node_CommentStmt:
		return "COMMENT", true
	case *pg.Node_SecLabelStmt:
		return "SECURITY LABEL", true
	case *pg.Node_GrantStmt:
		if x.GrantStmt.IsGrant {
			return "GRANT", true
		}
		return "REVOKE", true
	case *pg.Node_GrantRoleStmt:
		if x.GrantRoleStmt.IsGrant {
			return "GRANT ROLE", true
		}
		return "REVOKE ROLE", true
	case *pg.Node_AlterDefaultPrivilegesStmt:
		return "ALTER DEFAULT PRIVILEGES", true
	case *pg.Node_DefineStmt:
		return "CREATE " + objectTypeName(x.DefineStmt.Kind), true
	case *pg.Node_CompositeTypeStmt, *pg.Node_CreateEnumStmt, *pg.Node_CreateRangeStmt:
		return "CREATE TYPE", true
	case *pg.Node_AlterEnumStmt, *pg.Node_AlterTypeStmt:
		return "ALTER TYPE", true
	case *pg.Node_CreateDomainStmt:
		return "CREATE DOMAIN", true
	case *pg.Node_AlterDomainStmt:
		return "ALTER DOMAIN", true
	case *pg.Node_CreateExtensionStmt:
		return "CREATE EXTENSION", true
	case *pg.Node_AlterExtensionStmt, *pg.Node_AlterExtensionContentsStmt:
		return "ALTER EXTENSION", true
	case *pg.Node_CreateTrigStmt:
		return "CREATE TRIGGER", true
	case *pg.Node_CreateEventTrigStmt:
		return "CREATE EVENT TRIGGER", true
	case *pg.Node_AlterEventTrigStmt:
		return "ALTER EVENT TRIGGER", true
	case *pg.Node_RuleStmt:
		return "CREATE RULE", true
	case *pg.Node_CreatePolicyStmt:
		return "CREATE POLICY", true
	case *pg.Node_AlterPolicyStmt:
		return "ALTER POLICY", true
	case *pg.Node_CreateRoleStmt:
		return "CREATE ROLE", true
	case *pg.Node_AlterRoleStmt, *pg.Node_AlterRoleSetStmt:
		return "ALTER ROLE", true
	case *pg.Node_DropRoleStmt:
		return "DROP ROLE", true
	case *pg.Node_CreatedbStmt:
		return "CREATE DATABASE", true
	case *pg.Node_AlterDatabaseStmt, *pg.Node_AlterDatabaseSetStmt, *pg.Node_AlterDatabaseRefreshCollStmt:
		return "ALTER DATABASE", true
	case *pg.Node_DropdbStmt:
		return "DROP DATABASE", true
	case *pg.Node_CreateTableSpaceStmt:
		return "CREATE TABLESPACE", true
	case *pg.Node_DropTableSpaceStmt:
		return "DROP TABLESPACE", true
	case *pg.Node_AlterTableSpaceOptionsStmt:
		return "ALTER TABLESPACE", true
	case *pg.Node_AlterTableMoveAllStmt:
		return "ALTER TABLE", true
	case *pg.Node_CreateForeignTableStmt:
		return "CREATE FOREIGN TABLE", true
	case *pg.Node_CreateFdwStmt:
		return "CREATE FOREIGN DATA WRAPPER", true
	case *pg.Node_AlterFdwStmt:
		return "ALTER FOREIGN DATA WRAPPER", true
	case *pg.Node_CreateForeignServerStmt:
		return "CREATE SERVER", true
	case *pg.Node_AlterForeignServerStmt:
		return "ALTER SERVER", true
	case *pg.Node_CreateUserMappingStmt:
		return "CREATE USER MAPPING", true
	case *pg.Node_AlterUserMappingStmt:
		return "ALTER USER MAPPING", true
	case *pg.Node_DropUserMappingStmt:
		return "DROP USER MAPPING", true
	case *pg.Node_ImportForeignSchemaStmt:
		return "IMPORT FOREIGN SCHEMA", true
	case *pg.Node_CreateStatsStmt:
		return "CREATE STATISTICS", true
	case *pg.Node_AlterStatsStmt:
		return "ALTER STATISTICS", true
	case *pg.Node_CreateCastStmt:
		return "CREATE CAST", true
	case *pg.Node_CreateConversionStmt:
		return "CREATE CONVERSION", true
	case *pg.Node_CreateTransformStmt:
		return "CREATE TRANSFORM", true
	case *pg.Node_CreateOpClassStmt:
		return "CREATE OPERATOR CLASS", true
	case *pg.Node_CreateOpFamilyStmt:
		return "CREATE OPERATOR FAMILY", true
	case *pg.Node_AlterOpFamilyStmt:
		return "ALTER OPERATOR FAMILY", true
	case *pg.Node_AlterOperatorStmt:
		return "ALTER OPERATOR", true
	case *pg.Node_AlterCollationStmt:
		return "ALTER COLLATION", true
	case *pg.Node_CreatePlangStmt:
		return "CREATE LANGUAGE", true
	case *pg.Node_CreateAmStmt:
		return "CREATE ACCESS METHOD", true
	case *pg.Node_CreatePublicationStmt:
		return "CREATE PUBLICATION", true
	case *pg.Node_AlterPublicationStmt:
		return "ALTER PUBLICATION", true
	case *pg.Node_CreateSubscriptionStmt:
		return "CREATE SUBSCRIPTION", true
	case *pg.Node_AlterSubscriptionStmt:
		return "ALTER SUBSCRIPTION", true
	case *pg.Node_DropSubscriptionStmt:
		return "DROP SUBSCRIPTION", true
	case *pg.Node_AlterTsdictionaryStmt:
		return "ALTER TEXT SEARCH DICTIONARY", true
	case *pg.Node_AlterTsconfigurationStmt:
		return "ALTER TEXT SEARCH CONFIGURATION", true
	case *pg.Node_AlterObjectDependsStmt:
		return "ALTER " + objectTypeName(x.AlterObjectDependsStmt.ObjectType), true
	case *pg.Node_DropOwnedStmt:
		return "DROP OWNED", true
	case *pg.Node_ReassignOwnedStmt:
		return "REASSIGN OWNED", true
	case *pg.Node_RefreshMatViewStmt:
		return "REFRESH MATERIALIZED VIEW", true
	case *pg.Node_ReplicaIdentityStmt:
		return "ALTER TABLE", true
	}
	return "", false
}

func passThroughTag(n *pg.Node) string {
	switch x := n.Node.(type) {
	case *pg.Node_DoStmt:
		return "DO"
	case *pg.Node_CallStmt:
		return "CALL"
	case *pg.Node_LockStmt:
		return "LOCK TABLE"
	case *pg.Node_DiscardStmt:
		switch x.DiscardStmt.Target {
		case pg.DiscardMode_DISCARD_PLANS:
			return "DISCARD PLANS"
		case pg.DiscardMode_DISCARD_SEQUENCES:
			return "DISCARD SEQUENCES"
		case pg.DiscardMode_DISCARD_TEMP:
			return "DISCARD TEMP"
		}
		return "DISCARD ALL"
	case *pg.Node_LoadStmt:
		return "LOAD"
	case *pg.Node_CheckPointStmt:
		return "CHECKPOINT"
	case *pg.Node_ConstraintsSetStmt:
		return "SET CONSTRAINTS"
	case *pg.Node_AlterSystemStmt:
		return "ALTER SYSTEM"
	}
	return ""
}
