package frontend

import (
	"bytes"
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
)

// pqMessage reads a message body as PostgreSQL's pqformat.c does
// (pq_getmsgstring, pq_getmsgint, pq_getmsgend), so that a malformed Query
// or Parse is read as PostgreSQL reads it and fails with PostgreSQL's own
// ERROR: a NUL inside the query string ends the string there, and what
// follows is read as the next fields.
type pqMessage struct {
	body   []byte
	cursor int
}

// malformed is the error PostgreSQL raises for a body it cannot read: an
// ERROR, not FATAL, so only the message fails and the session goes on.
func malformed(message string) error {
	return pgerr.New(pgerr.ProtocolViolation, "%s", message)
}

// getString is pq_getmsgstring: the bytes up to the next NUL.
func (m *pqMessage) getString() (string, error) {
	n := bytes.IndexByte(m.body[m.cursor:], 0)
	if n < 0 {
		return "", malformed("invalid string in message")
	}
	s := string(m.body[m.cursor : m.cursor+n])
	m.cursor += n + 1
	return s, nil
}

// getUint is pq_getmsgint for a 2- or 4-byte integer.
func (m *pqMessage) getUint(size int) (uint32, error) {
	if len(m.body)-m.cursor < size {
		return 0, malformed("insufficient data left in message")
	}
	b := m.body[m.cursor : m.cursor+size]
	m.cursor += size
	if size == 2 {
		return uint32(binary.BigEndian.Uint16(b)), nil
	}
	return binary.BigEndian.Uint32(b), nil
}

// end is pq_getmsgend: nothing may be left over.
func (m *pqMessage) end() error {
	if m.cursor != len(m.body) {
		return malformed("invalid message format")
	}
	return nil
}

// decodeQuery reads a Query body as exec_simple_query's caller does.
func decodeQuery(body []byte) (*pgproto3.Query, error) {
	m := pqMessage{body: body}
	query, err := m.getString()
	if err != nil {
		return nil, err
	}
	if err := m.end(); err != nil {
		return nil, err
	}
	return &pgproto3.Query{String: query}, nil
}

// decodeParse reads a Parse body as PostgresMain does before
// exec_parse_message.
func decodeParse(body []byte) (*pgproto3.Parse, error) {
	m := pqMessage{body: body}
	name, err := m.getString()
	if err != nil {
		return nil, err
	}
	query, err := m.getString()
	if err != nil {
		return nil, err
	}
	count, err := m.getUint(2)
	if err != nil {
		return nil, err
	}
	var types []uint32
	for range count {
		oid, err := m.getUint(4)
		if err != nil {
			return nil, err
		}
		types = append(types, oid)
	}
	if err := m.end(); err != nil {
		return nil, err
	}
	return &pgproto3.Parse{Name: name, Query: query, ParameterOIDs: types}, nil
}
