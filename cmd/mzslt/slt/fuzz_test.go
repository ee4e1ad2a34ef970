package slt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary files to the parser and to rewrite: neither may
// panic, line numbers stay inside the file, and a rewrite without edits
// gives the file back unchanged.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.slt")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("query I nosort\r\nSELECT 1\r\n----\r\n1"))
	f.Add([]byte("skipif x\nonlyif y\nhalt\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		recs, _ := Parse(src)
		n := len(splitLines(src))
		var edits []edit
		for i := range recs {
			r := &recs[i]
			if r.Line < 1 || r.Line > n || r.outStart > r.outEnd || r.outEnd > n {
				t.Fatalf("record %+v out of a %d-line file", r, n)
			}
			if r.Directive == DirQuery && !r.ExpectError {
				edits = append(edits, edit{rec: r, lines: []string{"x"}})
			}
		}
		out, err := rewrite(src, nil)
		if err != nil || !bytes.Equal(out, src) {
			t.Fatalf("rewrite without edits changed the file: %q -> %q (%v)", src, out, err)
		}
		if _, err := rewrite(src, edits); err != nil {
			t.Fatal(err)
		}
	})
}
