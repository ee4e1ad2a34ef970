package wire

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestWriterReplaceFrame checks that a frame still queued can be replaced
// by one of another length, and that one written or dropped cannot.
func TestWriterReplaceFrame(t *testing.T) {
	encode := func(m pgproto3.FrontendMessage) []byte {
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	parse, bind := encode(&pgproto3.Parse{Query: "SELECT 1"}), encode(&pgproto3.Bind{})
	execute, sync := encode(&pgproto3.Execute{}), encode(&pgproto3.Sync{})
	other := encode(&pgproto3.Parse{Name: "x", Query: "not sql"})

	var out bytes.Buffer
	w := NewWriter(&out, 64)
	for _, f := range [][]byte{parse, bind} {
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	at := w.Pos()
	if err := w.WriteFrame(execute); err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&pgproto3.Sync{}); err != nil {
		t.Fatal(err)
	}
	if !w.ReplaceFrame(at, other) {
		t.Fatal("a queued frame could not be replaced")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := bytes.Join([][]byte{parse, bind, other, sync}, nil)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("written %q, want %q", out.Bytes(), want)
	}
	if w.Pos() != int64(len(want)) {
		t.Fatalf("Pos %d after %d bytes", w.Pos(), len(want))
	}
	if w.ReplaceFrame(at, execute) {
		t.Fatal("a written frame was replaced")
	}

	// A frame dropped by Reset, or written through for its size, is gone.
	at = w.Pos()
	_ = w.WriteFrame(execute)
	w.Reset(&out)
	if w.ReplaceFrame(at, other) {
		t.Fatal("a dropped frame was replaced")
	}
	big := encode(&pgproto3.Parse{Query: string(bytes.Repeat([]byte("x"), 100))})
	at = w.Pos()
	_ = w.WriteFrame(big)
	if w.Buffered() != 0 || w.ReplaceFrame(at, other) {
		t.Fatal("a frame larger than the buffer was held")
	}
}
