// Package pgerr is mzproxy's one error type that a client can see: an error
// decorated with a SQLSTATE code, flattened into an ErrorResponse only at the
// edge (the frontend). Callers check codes, never message text.
package pgerr

import (
	"errors"
	"fmt"
)

// Code is a five-character SQLSTATE.
type Code string

// The SQLSTATEs mzproxy itself raises. Backend errors keep whatever code
// PostgreSQL sent.
const (
	SuccessfulCompletion         Code = "00000"
	ConnectionException          Code = "08000"
	ConnectionFailure            Code = "08006"
	ProtocolViolation            Code = "08P01"
	FeatureNotSupported          Code = "0A000"
	InvalidParameterValue        Code = "22023"
	InvalidTransactionState      Code = "25000"
	ReadOnlySQLTransaction       Code = "25006"
	InFailedSQLTransaction       Code = "25P02"
	IdleInTransactionTimeout     Code = "25P03"
	InvalidAuthorizationSpec     Code = "28000"
	InvalidPassword              Code = "28P01"
	InvalidCatalogName           Code = "3D000"
	SerializationFailure         Code = "40001"
	SyntaxError                  Code = "42601"
	UndefinedObject              Code = "42704"
	UndefinedTable               Code = "42P01"
	DuplicateTable               Code = "42P07"
	TooManyConnections           Code = "53300"
	QueryCanceled                Code = "57014"
	AdminShutdown                Code = "57P01"
	CannotConnectNow             Code = "57P03"
	InternalError                Code = "XX000"
	ObjectNotInPrerequisiteState Code = "55000"
	InsufficientPrivilege        Code = "42501"
	ConfigurationLimitExceeded   Code = "53400"
	StatementTooComplex          Code = "54001" // PostgreSQL's "stack depth limit exceeded"
	UniqueViolation              Code = "23505"
	InvalidSQLStatementName      Code = "26000"
	InvalidCursorName            Code = "34000"
	DuplicatePreparedStatement   Code = "42P05"
	DuplicateCursor              Code = "42P03"
	UndefinedColumn              Code = "42703"
)

// Severities as PostgreSQL spells them on the wire.
const (
	SeverityError = "ERROR"
	SeverityFatal = "FATAL"
)

// Error is an error a client will see as an ErrorResponse.
type Error struct {
	Severity string // ERROR unless set; FATAL ends the connection
	Code     Code
	Message  string
	Detail   string
	Hint     string
	// Fields the backend sent that mzproxy relays unchanged (position,
	// schema, table, ...). Keyed by the protocol's one-byte field type.
	Extra map[byte]string
	cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the error this one was made from, if any.
func (e *Error) Unwrap() error { return e.cause }

// New returns an ERROR with code and a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Severity: SeverityError, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Fatal returns a FATAL error: the connection ends after it is sent.
func Fatal(code Code, format string, args ...any) *Error {
	return &Error{Severity: SeverityFatal, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap decorates cause with code; the message is the cause's.
func Wrap(code Code, cause error) *Error {
	return &Error{Severity: SeverityError, Code: code, Message: cause.Error(), cause: cause}
}

// WithDetail returns e with its detail set.
func (e *Error) WithDetail(format string, args ...any) *Error {
	e.Detail = fmt.Sprintf(format, args...)
	return e
}

// WithHint returns e with its hint set.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// IsFatal reports whether err ends the connection.
func (e *Error) IsFatal() bool { return e.Severity == SeverityFatal || e.Severity == "PANIC" }

// Of returns the SQLSTATE of err: its own if it is (or wraps) an *Error,
// else XX000.
func Of(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InternalError
}

// As returns err as an *Error, wrapping anything else as XX000.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Wrap(InternalError, err)
}
