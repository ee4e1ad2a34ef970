package planner

// PlainRead reports, without parsing, that sql is certainly a plain read
// of the present that the proxy may forward unchanged: it starts with
// SELECT, VALUES, TABLE, WITH or a parenthesis, it is one statement (no
// semicolon before its end), and no word in it (inside literals and
// comments too: the check is conservative) could make it anything else — a
// data-modifying CTE, SELECT INTO, AS OF or mz_now().
//
// A false answer means only "plan it": most statements that get one are
// reads too. This exists because a point SELECT sent over the simple
// protocol has new literals each time, so a plan cache keyed by text never
// hits for it, and parsing would cost more than forwarding.
func PlainRead(sql string) bool {
	first := true
	for i := 0; i < len(sql); {
		c := sql[i]
		if !isWordByte(c) {
			if c == ';' {
				return !first && onlySpace(sql[i+1:])
			}
			if first && c == '(' {
				first = false
			} else if first && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				// A comment or anything else before the first word: let
				// the parser judge.
				return false
			}
			i++
			continue
		}
		j := i
		for j < len(sql) && isWordByte(sql[j]) {
			j++
		}
		word := sql[i:j]
		i = j
		if first {
			first = false
			if !oneOf(word, "select", "values", "table", "with") {
				return false
			}
			continue
		}
		if len(word) >= 2 && len(word) <= 6 && oneOf(word, "insert", "update", "delete", "merge", "into", "of", "mz_now") {
			return false
		}
	}
	return !first
}

func onlySpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

// oneOf reports whether word equals one of the lower-case words, ignoring
// ASCII case.
func oneOf(word string, words ...string) bool {
	for _, w := range words {
		if len(w) == len(word) && equalFold(word, w) {
			return true
		}
	}
	return false
}

func equalFold(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
