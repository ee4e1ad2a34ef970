package occ

import (
	"errors"
	"fmt"

	"github.com/mzproxy/mzproxy/pgerr"
)

// RetriesExhaustedMessage is the start of the 40001 message of a write that
// kept losing its compare-and-append (Materialize's text).
const RetriesExhaustedMessage = "read-then-write exceeded maximum retry attempts under contention"

// retriesExhausted is the client's error after attempts failed appends.
func retriesExhausted(attempts int) *pgerr.Error {
	return pgerr.New(pgerr.SerializationFailure, "%s", RetriesExhaustedMessage).
		WithDetail("The write lost its compare-and-append to concurrent commits %d times.", attempts).
		WithHint("Reduce contention on the tables this statement writes, or retry the transaction.")
}

// ApplyError is returned when the append committed at T but the oracle
// could not be told (ApplyWrite failed). The write is durable: the proxy
// must not report it as not having happened. It may, for instance, retry
// ApplyWrite on another connection and then report success, or close the
// session; in mzproxy's backend read_ts is raised inside the commit
// transaction, so a failed ApplyWrite loses nothing.
type ApplyError struct {
	T    uint64
	Rows int64
	Err  error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("occ: write committed at %d, but the oracle could not apply it: %v", e.T, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Committed reports whether err says the write was nonetheless committed
// (an *ApplyError).
func Committed(err error) bool {
	var ae *ApplyError
	return errors.As(err, &ae)
}
