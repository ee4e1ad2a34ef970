package evloop

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"testing"
)

// frame is one protocol message's bytes: type, length, body.
func frame(typ byte, body []byte) []byte {
	f := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(f[1:], uint32(4+len(body)))
	return append(f, body...)
}

// randomSplit cuts b into pieces of random sizes (some empty, some one
// byte, some whole).
func randomSplit(rng *rand.Rand, b []byte) [][]byte {
	var pieces [][]byte
	for len(b) > 0 {
		n := rng.Intn(len(b) + 1)
		if rng.Intn(4) == 0 {
			n = min(1, len(b))
		}
		pieces = append(pieces, b[:n])
		b = b[n:]
	}
	return pieces
}

// TestJudgeBatchEveryPrefix: each prefix of an extended-protocol batch up
// to its Execute is partial, with exactly the whole frames counted; one
// cut short after a whole Execute goes to the connection's goroutine (a
// cancel before the Sync is for that Execute); the batch is whole at its
// Sync; a byte more is a pipeline.
func TestJudgeBatchEveryPrefix(t *testing.T) {
	var batch []byte
	var ends []int
	executeEnd := 0
	for _, f := range [][]byte{
		frame('P', []byte("\x00SELECT 1\x00\x00\x00")),
		frame('B', []byte("\x00\x00\x00\x00\x00\x00\x00\x00")),
		frame('D', []byte("P\x00")),
		frame('E', []byte("\x00\x00\x00\x00\x00")),
		frame('S', nil),
	} {
		batch = append(batch, f...)
		ends = append(ends, len(batch))
		if f[0] == 'E' {
			executeEnd = len(batch)
		}
	}
	for n := 0; n < len(batch); n++ {
		whole := 0
		for _, e := range ends {
			if e <= n {
				whole = e
			}
		}
		want := batchPartial
		if n >= executeEnd {
			want = batchOther
		}
		if state, w := judgeBatch(batch[:n], 1<<20, 1<<20); state != want || w != whole {
			t.Fatalf("prefix %d: %v, %d; want %v, %d", n, state, w, want, whole)
		}
	}
	if state, w := judgeBatch(batch, 1<<20, 1<<20); state != batchWhole || w != len(batch) {
		t.Fatalf("whole batch: %v, %d", state, w)
	}
	if state, _ := judgeBatch(append(bytes.Clone(batch), 'Q'), 1<<20, 1<<20); state != batchOther {
		t.Fatalf("a pipeline: %v", state)
	}
	if state, _ := judgeBatch(batch, len(batch)-1, 1<<20); state != batchOther {
		t.Fatalf("a batch over the batch limit: %v", state)
	}
	if state, _ := judgeBatch(batch[:5], 1<<20, 12); state != batchOther {
		t.Fatalf("a frame over the frame limit, at its header: %v", state)
	}
}

// TestAnswerScannerRandomSplits: the backend's answers, cut anywhere
// across reads, give the same kept frames (DataRows counted past).
func TestAnswerScannerRandomSplits(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 2000; round++ {
		var stream []byte
		var want [][]byte
		for range rng.Intn(8) + 1 {
			typ := []byte("TDDDCNEZ")[rng.Intn(8)]
			body := make([]byte, rng.Intn(40))
			rng.Read(body)
			f := frame(typ, body)
			stream = append(stream, f...)
			if typ != 'D' {
				want = append(want, f)
			}
		}
		var s answerScanner
		var got [][]byte
		for _, piece := range randomSplit(rng, stream) {
			s.feed(piece, func(typ byte, f []byte) bool {
				if typ != f[0] {
					t.Fatalf("type %c for frame %q", typ, f)
				}
				got = append(got, bytes.Clone(f))
				return true
			})
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d frames, want %d", round, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d frame %d: %q, want %q", round, i, got[i], want[i])
			}
		}
	}
}
