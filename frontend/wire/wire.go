// Package wire frames PostgreSQL protocol messages over a byte stream. It is
// the one place that trusts a length field: every length is checked against a
// maximum before anything is allocated or read.
//
// Both sides of the proxy use it: the frontend for client connections, the
// proxy for backend connections. Frames are relayed as raw bytes where nothing
// needs decoding, so a DataRow crosses the proxy without being parsed.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
)

// DefaultMaxMessageSize bounds a typed message (including its length word).
const DefaultMaxMessageSize = 64 << 20

// MaxStartupPacketSize is PostgreSQL's own limit for the untyped startup packet.
const MaxStartupPacketSize = 10000

// ErrorKind tells why framing failed.
type FrameError struct {
	Msg string
}

func (e *FrameError) Error() string { return e.Msg }

// Reader reads messages. Not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	max     int
	discard int    // bytes of the previous frame still in br
	big     []byte // frames larger than br's buffer
	// limit, when set, bounds each type's frames (SetLimit).
	limit func(typ byte) int
}

// SetLimit makes the Reader judge each frame by its header, before it
// waits for the body: limit(typ) bounds a frame of that type (length word
// and body; the Reader's own maximum still applies), and 0 refuses the
// type at once.
func (r *Reader) SetLimit(limit func(typ byte) int) { r.limit = limit }

// Frontend message limits, PostgreSQL's (postgres.c, SocketBackend):
// messages that carry a client's data may be large, the others hold a
// few names and counts.
const (
	// smallFrontendMessage is PQ_SMALL_MESSAGE_LIMIT.
	smallFrontendMessage = 10000
	// authFrontendMessage is PG_MAX_AUTH_TOKEN_LENGTH (a password or
	// SASL message).
	authFrontendMessage = 65535
)

// FrontendLimit is a client connection's limit for SetLimit: the message
// types a client may send, each with PostgreSQL's bound (a Query, Parse,
// Bind, CopyData or FunctionCall only by the Reader's maximum). Any other
// type byte (the first byte of a StartupMessage or SSLRequest sent
// mid-session is 0) is refused before its length is believed, as
// PostgreSQL refuses it: a client that lost the message boundaries is not
// waited for.
func FrontendLimit(typ byte) int {
	switch typ {
	case 'Q', 'P', 'B', 'd', 'F':
		return math.MaxInt
	case 'C', 'D', 'E', 'H', 'S', 'X', 'c', 'f':
		return smallFrontendMessage
	case 'p':
		return authFrontendMessage
	}
	return 0
}

// NewReader returns a Reader over r with a buffer of size bytes that refuses
// messages longer than max bytes.
func NewReader(r io.Reader, size, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxMessageSize
	}
	return &Reader{br: bufio.NewReaderSize(r, size), max: max}
}

// Reset makes the Reader read from r, dropping anything buffered.
func (r *Reader) Reset(src io.Reader) {
	r.br.Reset(src)
	r.discard = 0
}

// Buffered reports how many bytes can be read without blocking, not counting
// the frame most recently returned.
func (r *Reader) Buffered() int { return r.br.Buffered() - r.discard }

func (r *Reader) release() error {
	if r.discard > 0 {
		n := r.discard
		r.discard = 0
		if _, err := r.br.Discard(n); err != nil {
			return err
		}
	}
	return nil
}

// Next reads one typed message and returns its type byte and the whole frame
// (type, length and body). The frame is valid until the next call.
func (r *Reader) Next() (byte, []byte, error) {
	if err := r.release(); err != nil {
		return 0, nil, err
	}
	if r.limit != nil {
		typ, err := r.br.Peek(1)
		if err != nil {
			return 0, nil, err
		}
		if r.limit(typ[0]) == 0 {
			return 0, nil, &FrameError{fmt.Sprintf("invalid frontend message type %d", typ[0])}
		}
	}
	hdr, err := r.br.Peek(5)
	if err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:5]))
	if n < 4 {
		return 0, nil, &FrameError{fmt.Sprintf("invalid message length %d for message type %q", n, hdr[0])}
	}
	if r.limit != nil && n+1 > r.limit(hdr[0]) {
		return 0, nil, &FrameError{fmt.Sprintf("invalid message length %d for message type %q (limit %d)", n, hdr[0], r.limit(hdr[0]))}
	}
	if n > r.max-1 {
		return 0, nil, &FrameError{fmt.Sprintf("message of type %q is too large (%d bytes, limit %d)", hdr[0], n+1, r.max)}
	}
	total := n + 1
	if total <= r.br.Size() {
		frame, err := r.br.Peek(total)
		if err != nil {
			return 0, nil, noEOF(err)
		}
		r.discard = total
		return frame[0], frame, nil
	}
	if cap(r.big) < total {
		r.big = make([]byte, total)
	}
	frame := r.big[:total]
	if _, err := io.ReadFull(r.br, frame); err != nil {
		return 0, nil, noEOF(err)
	}
	return frame[0], frame, nil
}

// NextUntyped reads a startup-phase message (length word, then body) and
// returns its body.
func (r *Reader) NextUntyped() ([]byte, error) {
	if err := r.release(); err != nil {
		return nil, err
	}
	hdr, err := r.br.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n < 8 || n > MaxStartupPacketSize {
		return nil, &FrameError{fmt.Sprintf("invalid length of startup packet (%d)", n)}
	}
	frame, err := r.br.Peek(n)
	if err != nil {
		return nil, noEOF(err)
	}
	r.discard = n
	return frame[4:], nil
}

// A stream that ends inside a frame was cut short: that is not a clean EOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Body returns a frame's body (what follows the type and length).
func Body(frame []byte) []byte { return frame[5:] }

// Writer buffers messages for one stream. Not safe for concurrent use.
//
// It is bufio.Writer with one addition: the bytes it holds can be changed
// before they are written (ReplaceFrame). A position names a byte of the stream
// (Pos): one that is still held can be replaced, one written (or dropped by
// Reset) cannot.
type Writer struct {
	dst   io.Writer
	buf   []byte
	size  int
	start int64 // the position of buf[0]
	err   error // a failed write: the stream is broken
}

// NewWriter returns a Writer over w with a buffer of size bytes.
func NewWriter(w io.Writer, size int) *Writer {
	return &Writer{dst: w, buf: make([]byte, 0, size), size: size}
}

// Reset makes the Writer write to w, dropping anything buffered.
func (w *Writer) Reset(dst io.Writer) {
	w.dst = dst
	w.start += int64(len(w.buf))
	w.buf = w.buf[:0]
	w.err = nil
}

// WriteFrame queues a raw frame.
func (w *Writer) WriteFrame(frame []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf)+len(frame) > w.size && len(w.buf) > 0 {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(frame) >= w.size {
		// Too big to be worth copying: written through.
		w.start += int64(len(frame))
		return w.write(frame)
	}
	w.buf = append(w.buf, frame...)
	return nil
}

// Send queues an encoded message.
func (w *Writer) Send(msg pgproto3.Message) error {
	if w.err != nil {
		return w.err
	}
	out, err := msg.Encode(w.buf)
	if err != nil {
		return err
	}
	w.buf = out
	if len(w.buf) < w.size {
		return nil
	}
	err = w.Flush()
	if cap(w.buf) > 2*w.size {
		// A large message grew the buffer: not kept.
		w.buf = make([]byte, 0, w.size)
	}
	return err
}

// Buffered reports the bytes queued and not yet written.
func (w *Writer) Buffered() int { return len(w.buf) }

// Pos is the position of the next byte queued: the count of bytes queued
// since the Writer was made.
func (w *Writer) Pos() int64 { return w.start + int64(len(w.buf)) }

// ReplaceFrame replaces the frame queued at position pos with frame and
// reports whether it could: it cannot once any of its bytes were written.
func (w *Writer) ReplaceFrame(pos int64, frame []byte) bool {
	off := pos - w.start
	if w.err != nil || off < 0 || off+5 > int64(len(w.buf)) {
		return false
	}
	end := off + 1 + int64(binary.BigEndian.Uint32(w.buf[off+1:]))
	if end > int64(len(w.buf)) {
		return false
	}
	w.buf = slices.Replace(w.buf, int(off), int(end), frame...)
	return true
}

// Flush writes everything queued.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	err := w.write(w.buf)
	w.start += int64(len(w.buf))
	w.buf = w.buf[:0]
	return err
}

func (w *Writer) write(p []byte) error {
	n, err := w.dst.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	w.err = err
	return err
}

// Startup is what a client asked for in its StartupMessage.
type Startup struct {
	User     string
	Database string
	// Params holds every parameter the client sent, including user,
	// database, application_name and options.
	Params map[string]string
	// RemoteAddr is the client's address, for logs.
	RemoteAddr string
	// TLS reports whether the client connection is encrypted.
	TLS bool
	// Session is the session's id in logs: the process id the client is
	// told in BackendKeyData.
	Session uint32
}

// AuthRelay lets a handler run an authentication exchange with the client
// (passthrough authentication relays the backend's own exchange).
type AuthRelay interface {
	// SendAuth sends an authentication request to the client and flushes.
	SendAuth(msg pgproto3.BackendMessage) error
	// ReceiveAuth reads the client's next authentication response frame
	// ('p': password, SASLInitialResponse or SASLResponse).
	ReceiveAuth() ([]byte, error)
}

// ErrSessionOver is returned by a session that has already told the client
// why it ends (it relayed the backend's FATAL error): the frontend closes the
// connection without another word.
var ErrSessionOver = errors.New("session over")
