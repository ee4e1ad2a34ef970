package slt

import (
	"bytes"
	"os"
	"sort"
)

// edit replaces a record's expected output with lines.
type edit struct {
	rec   *Record
	lines []string
}

// rewriteFile writes src back to path with each edited record's expected
// block replaced, adding a "----" line where a query had none. Lines not
// edited keep their bytes, line endings included.
func rewriteFile(path string, src []byte, edits []edit) error {
	out, err := rewrite(src, edits)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".mzslt-rewrite"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func rewrite(src []byte, edits []edit) ([]byte, error) {
	raw := bytes.SplitAfter(src, []byte("\n"))
	if len(raw) > 0 && len(raw[len(raw)-1]) == 0 {
		raw = raw[:len(raw)-1]
	}
	nl := "\n"
	if len(raw) > 0 && bytes.HasSuffix(raw[0], []byte("\r\n")) {
		nl = "\r\n"
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].rec.outStart < edits[j].rec.outStart })
	var b bytes.Buffer
	at := 0
	for _, e := range edits {
		r := e.rec
		for ; at < r.outStart && at < len(raw); at++ {
			b.Write(raw[at])
		}
		if at > 0 && !bytes.HasSuffix(raw[at-1], []byte("\n")) {
			b.WriteString(nl) // the file ended without a newline
		}
		if !r.HasOutput {
			b.WriteString("----" + nl)
		}
		for _, l := range e.lines {
			b.WriteString(l + nl)
		}
		at = r.outEnd
	}
	for ; at < len(raw); at++ {
		b.Write(raw[at])
	}
	return b.Bytes(), nil
}
