package evloop

import (
	"encoding/binary"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// batchState is what a client's bytes are, read from the start.
type batchState uint8

const (
	batchPartial batchState = iota // whole frames so far, no end yet, or a frame cut short
	batchWhole                     // whole frames ending with the batch's only Query or Sync
	batchOther                     // anything else: for the connection's own goroutine
)

// judgeBatch looks at a client's bytes: one batch is whole frames of which
// the last, and only it, is a Query or a Sync. What the connection's own
// reader would refuse (a length below 4, a frame longer than maxFrame or
// than its type's limit, wire.FrontendLimit),
// more than one batch (a pipeline), or a batch longer than maxBatch, goes
// back to the connection's goroutine, which answers it as it always does.
// So does, from its type byte on, a frame after which no Sync may be
// waited for, because the client may be waiting for its answer: a Flush
// (asyncpg's prepare is Parse, Describe, Flush), a FunctionCall, a
// Terminate, COPY data, or a type the frontend refuses. So does a batch cut
// short after a whole Execute: PostgreSQL would be running that Execute,
// and a CancelRequest the client sends before its Sync must stop it, which
// the session can do only once it has the Execute. whole is how many bytes
// at the start are whole frames.
func judgeBatch(b []byte, maxBatch, maxFrame int) (state batchState, whole int) {
	executed := false
	short := func(off int) (batchState, int) {
		if executed {
			return batchOther, off
		}
		return partialOr(len(b), maxBatch), off
	}
	for off := 0; ; {
		if off < len(b) && !batchType(b[off]) {
			return batchOther, off
		}
		if len(b)-off < 5 {
			return short(off)
		}
		n := int(binary.BigEndian.Uint32(b[off+1:]))
		if n < 4 || 1+n > maxFrame || 1+n > wire.FrontendLimit(b[off]) {
			return batchOther, off
		}
		end := off + 1 + n
		if end > maxBatch {
			return batchOther, off
		}
		if end > len(b) {
			return short(off)
		}
		executed = executed || b[off] == 'E'
		if typ := b[off]; typ == 'Q' || typ == 'S' {
			if end == len(b) {
				return batchWhole, end
			}
			return batchOther, end
		}
		off = end
	}
}

// batchType: a message a batch the loop forwards can hold (Close is
// never admitted, but a Sync ends its batch all the same).
func batchType(typ byte) bool {
	switch typ {
	case 'Q', 'S', 'P', 'B', 'D', 'E', 'C':
		return true
	}
	return false
}

func partialOr(need, max int) batchState {
	if need > max {
		return batchOther
	}
	return batchPartial
}

// answerScanner follows the frames of the backend's answers as they
// stream through, in pieces of any size: DataRows are only counted past
// (unless keepRows), and so are the frames of QuietFrame while quiet;
// every other frame is kept whole for the session to follow.
type answerScanner struct {
	keepRows bool // DataRows are kept and passed on too (a held answer)
	// quiet: the peer need not see the frames of QuietFrame (Quieter).
	quiet bool
	hdr   [5]byte
	nhdr  int
	left  int    // bytes of the current frame's body still to come
	keep  []byte // the current frame, if it is kept
	typ   byte
	// keeping: the current frame is kept (keepRows read at its header).
	keeping bool
}

// feed scans p and calls frame for each kept frame completed in it; it
// stops early, with false, when frame does.
func (s *answerScanner) feed(p []byte, frame func(typ byte, f []byte) bool) bool {
	for len(p) > 0 {
		if s.nhdr < 5 {
			n := copy(s.hdr[s.nhdr:], p)
			s.nhdr += n
			p = p[n:]
			if s.nhdr < 5 {
				return true
			}
			s.typ = s.hdr[0]
			s.left = int(binary.BigEndian.Uint32(s.hdr[1:])) - 4
			if s.left < 0 {
				return frame(0, nil) // malformed: the session decides
			}
			s.keep = s.keep[:0]
			s.keeping = s.keepRows || s.typ != 'D' && !(s.quiet && QuietFrame(s.typ))
			if s.keeping {
				s.keep = append(s.keep, s.hdr[:]...)
			}
		}
		n := min(s.left, len(p))
		if s.keeping {
			s.keep = append(s.keep, p[:n]...)
		}
		s.left -= n
		p = p[n:]
		if s.left == 0 {
			s.nhdr = 0
			if s.keeping && !frame(s.typ, s.keep) {
				return false
			}
		}
	}
	return true
}
