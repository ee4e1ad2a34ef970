package proxy

import (
	"context"
	"strconv"
	"strings"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// A session's temporary relations shadow managed objects of the same name
// wherever its search_path has pg_temp (first, unless listed elsewhere),
// as in PostgreSQL: a timestamped read must then read the temporary
// relation, which has no history, and not the managed one. The proxy does
// not see the backend's catalog, so it asks for the session's temporary
// relations before planning a timestamped read, once a text of the
// session may have made one: one with the word TEMP or TEMPORARY, or
// naming pg_temp (saysTemp). A session that never says it pays
// nothing. A function that makes a temporary relation from a text the
// session never sent (its body created elsewhere, building the word at
// run time) is not seen (README, Limitations).

// tempWord is the word of a text that may make a temporary relation.
const tempWord = "temp"

// saysTemp reports whether sql has the word TEMP or TEMPORARY, or names
// the schema pg_temp (or pg_temp_N), in any case: not "attempts" or
// "temperature", which would cost their sessions the event loop's
// timestamped reads for nothing.
func saysTemp(sql string) bool {
	ident := func(c byte) bool {
		return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	for i := 0; i+len(tempWord) <= len(sql); i++ {
		if !strings.EqualFold(sql[i:i+len(tempWord)], tempWord) {
			continue
		}
		start, end := i, i+len(tempWord)
		if start >= 3 && strings.EqualFold(sql[start-3:start], "pg_") {
			start -= 3
			if end < len(sql) && sql[end] == '_' {
				for end++; end < len(sql) && sql[end] >= '0' && sql[end] <= '9'; end++ {
				}
			}
		} else if end+5 <= len(sql) && strings.EqualFold(sql[end:end+5], "orary") {
			end += 5
		}
		if (start == 0 || !ident(sql[start-1])) && (end == len(sql) || !ident(sql[end])) {
			return true
		}
	}
	return false
}

// tempSet is tempWord's table; noteSet is forgetWords and tempWord, the
// first scan of every text (known.go).
var tempSet, noteSet = planner.NewFoldWords(tempWord), planner.NewFoldWords(append([]string{tempWord}, forgetWords...)...)

// tempsSQL lists the session's temporary relations that a FROM can name,
// each name as its length in bytes, a colon and its bytes (” for none).
const tempsSQL = "SELECT coalesce(pg_catalog.string_agg(pg_catalog.octet_length(relname)::text || ':' || relname, ''), '')" +
	" FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema() AND relkind IN ('r', 'v', 'm', 'f', 'p', 'S')"

// withSessionTemps is cat as the session sees it: with its temporary
// relations, read from the backend, when a text of the session may have
// made one (see above); cat itself otherwise.
func (s *Session) withSessionTemps(ctx context.Context, cat *catalogSnapshot) (*catalogSnapshot, error) {
	if !s.tempSeen {
		return cat, nil
	}
	show := s.be.internalValue
	if s.tx == txIdle && !s.be.bound && s.units.len() == 0 {
		show = s.be.valueOwnBatch
	}
	v, err := show(ctx, tempsSQL)
	if err != nil {
		return nil, err
	}
	temps, err := parseTemps(v)
	if err != nil {
		return nil, pgerr.New(pgerr.InternalError, "the session's temporary relations %q: %v", v, err)
	}
	return cat.withTemps(temps), nil
}

// parseTemps reads tempsSQL's answer.
func parseTemps(v string) (map[string]bool, error) {
	var temps map[string]bool
	for v != "" {
		colon := strings.IndexByte(v, ':')
		if colon < 0 {
			return nil, strconv.ErrSyntax
		}
		n, err := strconv.Atoi(v[:colon])
		if err != nil || n < 0 || n > len(v)-colon-1 {
			return nil, strconv.ErrSyntax
		}
		if temps == nil {
			temps = make(map[string]bool)
		}
		temps[v[colon+1:colon+1+n]] = true
		v = v[colon+1+n:]
	}
	return temps, nil
}
