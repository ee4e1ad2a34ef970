package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

// Messages of the session scripts (session_script_test.go): one message a
// line, its pgproto3 type name, then its fields as JSON (pgproto3's own
// encoding), e.g.
//
//	Parse {"Query": "INSERT INTO t VALUES ($1)"}
//	Bind {"Parameters": [{"text": "1"}]}
//	ReadyForQuery {"TxStatus": "I"}
//
// Fields left out are zero; the output leaves zero fields out. CopyData
// is written {"Text": "..."} when its bytes are printable, else {"Data":
// "<hex>"}, as pgproto3 writes it.

// frontendMessages are the messages a script's client sends.
var frontendMessages = map[string]func() pgproto3.FrontendMessage{
	"Query":        func() pgproto3.FrontendMessage { return &pgproto3.Query{} },
	"Parse":        func() pgproto3.FrontendMessage { return &pgproto3.Parse{} },
	"Bind":         func() pgproto3.FrontendMessage { return &pgproto3.Bind{} },
	"Describe":     func() pgproto3.FrontendMessage { return &pgproto3.Describe{} },
	"Execute":      func() pgproto3.FrontendMessage { return &pgproto3.Execute{} },
	"Close":        func() pgproto3.FrontendMessage { return &pgproto3.Close{} },
	"Sync":         func() pgproto3.FrontendMessage { return &pgproto3.Sync{} },
	"Flush":        func() pgproto3.FrontendMessage { return &pgproto3.Flush{} },
	"CopyData":     func() pgproto3.FrontendMessage { return &pgproto3.CopyData{} },
	"CopyDone":     func() pgproto3.FrontendMessage { return &pgproto3.CopyDone{} },
	"CopyFail":     func() pgproto3.FrontendMessage { return &pgproto3.CopyFail{} },
	"FunctionCall": func() pgproto3.FrontendMessage { return &pgproto3.FunctionCall{} },
	"Terminate":    func() pgproto3.FrontendMessage { return &pgproto3.Terminate{} },
}

// backendMessages are the messages a script's backend sends.
var backendMessages = map[string]func() pgproto3.BackendMessage{
	"ParseComplete":        func() pgproto3.BackendMessage { return &pgproto3.ParseComplete{} },
	"BindComplete":         func() pgproto3.BackendMessage { return &pgproto3.BindComplete{} },
	"CloseComplete":        func() pgproto3.BackendMessage { return &pgproto3.CloseComplete{} },
	"ParameterDescription": func() pgproto3.BackendMessage { return &pgproto3.ParameterDescription{} },
	"RowDescription":       func() pgproto3.BackendMessage { return &pgproto3.RowDescription{} },
	"NoData":               func() pgproto3.BackendMessage { return &pgproto3.NoData{} },
	"DataRow":              func() pgproto3.BackendMessage { return &pgproto3.DataRow{} },
	"CommandComplete":      func() pgproto3.BackendMessage { return &pgproto3.CommandComplete{} },
	"EmptyQueryResponse":   func() pgproto3.BackendMessage { return &pgproto3.EmptyQueryResponse{} },
	"PortalSuspended":      func() pgproto3.BackendMessage { return &pgproto3.PortalSuspended{} },
	"ErrorResponse":        func() pgproto3.BackendMessage { return &pgproto3.ErrorResponse{} },
	"NoticeResponse":       func() pgproto3.BackendMessage { return &pgproto3.NoticeResponse{} },
	"NotificationResponse": func() pgproto3.BackendMessage { return &pgproto3.NotificationResponse{} },
	"ParameterStatus":      func() pgproto3.BackendMessage { return &pgproto3.ParameterStatus{} },
	"ReadyForQuery":        func() pgproto3.BackendMessage { return &pgproto3.ReadyForQuery{} },
	"CopyInResponse":       func() pgproto3.BackendMessage { return &pgproto3.CopyInResponse{} },
	"CopyOutResponse":      func() pgproto3.BackendMessage { return &pgproto3.CopyOutResponse{} },
	"CopyData":             func() pgproto3.BackendMessage { return &pgproto3.CopyData{} },
	"CopyDone":             func() pgproto3.BackendMessage { return &pgproto3.CopyDone{} },
	"FunctionCallResponse": func() pgproto3.BackendMessage { return &pgproto3.FunctionCallResponse{} },
}

// parseMessage reads one script line into the message made by newMsg for
// its type name.
func parseMessage[M any](line string, registry map[string]func() M) (M, error) {
	var zero M
	name, fields, _ := strings.Cut(strings.TrimSpace(line), " ")
	newMsg, ok := registry[name]
	if !ok {
		return zero, fmt.Errorf("unknown message type %q", name)
	}
	msg := newMsg()
	fields = strings.TrimSpace(fields)
	if fields == "" {
		return msg, nil
	}
	if cd, ok := any(msg).(*pgproto3.CopyData); ok {
		var text struct{ Text *string }
		if err := json.Unmarshal([]byte(fields), &text); err == nil && text.Text != nil {
			cd.Data = []byte(*text.Text)
			return msg, nil
		}
	}
	if _, ok := copyResponses[name]; ok {
		// pgproto3 wants the overall format spelled out as a character.
		fields = withDefault(fields, "OverallFormat", "\x00")
	}
	if err := json.Unmarshal([]byte(fields), msg); err != nil {
		return zero, fmt.Errorf("%s: %v", name, err)
	}
	return msg, nil
}

// copyResponses are the messages whose OverallFormat the scripts may
// leave out (text).
var copyResponses = map[string]bool{"CopyInResponse": true, "CopyOutResponse": true}

// withDefault sets key in the JSON object fields when it is missing.
func withDefault(fields, key, value string) string {
	var m map[string]any
	if json.Unmarshal([]byte(fields), &m) != nil {
		return fields
	}
	if _, ok := m[key]; !ok {
		m[key] = value
	}
	return compactJSON(m)
}

// formatMessage writes msg as a script line: its type name and its
// non-zero fields.
func formatMessage(msg any) string {
	name := reflect.TypeOf(msg).Elem().Name()
	if cd, ok := msg.(*pgproto3.CopyData); ok && printable(cd.Data) {
		return name + " " + compactJSON(map[string]any{"Text": string(cd.Data)})
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return name + " (cannot encode: " + err.Error() + ")"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return name + " " + string(raw)
	}
	delete(fields, "Type")
	dropZeros(fields)
	if len(fields) == 0 {
		return name
	}
	return name + " " + compactJSON(fields)
}

// dropZeros removes the zero fields of an object, and of the objects in
// it.
func dropZeros(fields map[string]any) {
	for k, v := range fields {
		if isZeroJSON(v) {
			delete(fields, k)
		}
	}
	for _, v := range fields {
		switch v := v.(type) {
		case map[string]any:
			dropZeros(v)
		case []any:
			for _, e := range v {
				if m, ok := e.(map[string]any); ok {
					dropZeros(m)
				}
			}
		}
	}
}

func isZeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == "" || v == "\x00" // a byte field's zero
	case bool:
		return !v
	case json.Number:
		return v.String() == "0"
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// compactJSON encodes v with sorted keys and without HTML escapes.
func compactJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("(cannot encode: %v)", err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// The scripts' catalog: one managed table, public.t (a integer, b text),
// catalog id 1, history mzproxy.h1, since 1; the upper is 100. Anything
// else a script names is not managed.
const (
	scriptTableID = 1
	scriptSince   = 1
	scriptUpper   = 100
)

// scriptCatalog loads the scripts' catalog through storage.LoadCatalog,
// from rows as the backend would return them.
func scriptCatalog() (*storage.Catalog, error) {
	str := func(s string) *string { return &s }
	oid := func(o uint32) *uint32 { return &o }
	mod := int32(-1)
	no := false
	row := func(col, typ string, typOID uint32) []any {
		return []any{int64(scriptTableID), "table", uint32(16384), "public", "t", storage.Schema + ".h1", "",
			int64(scriptSince), int64(1), false, true, str(col), oid(typOID), &mod, str(typ), &no}
	}
	q := &fakeQuerier{revision: 1, rows: [][]any{row("a", "integer", 23), row("b", "text", 25)}}
	return storage.LoadCatalog(context.Background(), q)
}

// scriptDatabase is the catalog and frontiers every snapshot of the
// scripts' database returns.
func scriptDatabase() (*seenFrontiers, error) {
	cat, err := scriptCatalog()
	if err != nil {
		return nil, err
	}
	fr := &storage.FrontierState{Upper: scriptUpper, Since: map[int64]uint64{scriptTableID: scriptSince}}
	return &seenFrontiers{catalog: newCatalogSnapshot(cat), frontiers: fr}, nil
}

// fakeQuerier answers storage.LoadCatalog: QueryRow with the revision,
// Query with rows.
type fakeQuerier struct {
	revision int64
	rows     [][]any
}

func (q *fakeQuerier) QueryRow(context.Context, string, ...any) pgx.Row {
	return &fakeRows{rows: [][]any{{q.revision}}, at: -1}
}

func (q *fakeQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return &fakeRows{rows: q.rows, at: -1}, nil
}

// fakeRows scans values of exactly the destinations' types; LoadCatalog
// calls no other method than these.
type fakeRows struct {
	pgx.Rows
	rows [][]any
	at   int
}

func (r *fakeRows) Next() bool {
	r.at++
	return r.at < len(r.rows)
}

func (r *fakeRows) Scan(dest ...any) error {
	if r.at < 0 && !r.Next() {
		return pgx.ErrNoRows
	}
	row := r.rows[r.at]
	if len(row) != len(dest) {
		return fmt.Errorf("fake rows: %d values for %d destinations", len(row), len(dest))
	}
	for i, v := range row {
		reflect.ValueOf(dest[i]).Elem().Set(reflect.ValueOf(v))
	}
	return nil
}

func (r *fakeRows) Close()     {}
func (r *fakeRows) Err() error { return nil }
