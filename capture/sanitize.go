package capture

// Query text sanitization, as OpenTelemetry's database conventions ask of
// db.query.text: every literal becomes ?, comments go, the statement keeps
// its shape. It is a lexer, not a parser: it knows PostgreSQL's and MySQL's
// literal syntax (and, for --protocol raw, a cautious mix of both), so it
// never needs to understand the statement to hide its values.
//
//   - strings: '...' with '' (and, in MySQL, backslash escapes); PostgreSQL
//     E'...', U&'...', dollar quoting ($$...$$, $tag$...$tag$); MySQL "..."
//     (a string unless ANSI_QUOTES); B'...', X'...', N'...' in both.
//     Adjacent strings ('a' 'b', a concatenation) become one ?.
//   - numbers: 42, -42, 4.2e-1, .5, 0x2A, 0b101, 0o52, 1_000; a sign is part
//     of the number where it cannot be a subtraction (after an operator, a
//     '(' or ',', or a keyword such as SELECT or WHERE).
//   - lists: IN (?, ?, ?) becomes IN (?), ARRAY[?, ?] becomes ARRAY[?], and
//     VALUES rows equal once sanitized are kept once: VALUES (?, ?), (?, ?)
//     becomes VALUES (?, ?). Only repeats go: IN (?, NULL) stays.
//   - comments (-- to the end of the line, /* */ nested as PostgreSQL nests
//     them, MySQL's #) are removed; a run of white space and comments
//     becomes one space, so the shape stays and white space is normalised.
//   - kept as written: identifiers and keywords, PostgreSQL "quoted"
//     identifiers, MySQL `quoted` ones, parameters ($1, MySQL's ?), operators.
//
// An unterminated string or comment runs to the end of the text, so a
// query cut short (the raw preview, a lost fragment) hides its tail too.
// Where the dialects disagree (backslashes in '...'), each follows its
// server's default (standard_conforming_strings on; MySQL without
// NO_BACKSLASH_ESCAPES).

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// dialect of the text: which quotes mean what.
type dialect uint8

const (
	dialectPostgres dialect = iota
	dialectMySQL
	dialectRaw // unknown protocol: "..." is a string, backslashes escape, # is a comment, $$ quotes
)

func dialectOf(protocol string) dialect {
	switch protocol {
	case "postgres", "postgresql", "":
		return dialectPostgres
	case "mysql", "mariadb":
		return dialectMySQL
	}
	return dialectRaw
}

type tokKind uint8

const (
	tkWord  tokKind = iota // identifier or keyword
	tkIdent                // quoted identifier, kept verbatim
	tkLit                  // a literal, shown as ?
	tkParam                // $1, MySQL's ?
	tkOp                   // one punctuation or operator character
)

type token struct {
	kind  tokKind
	space bool   // white space or a comment came before it
	str   bool   // tkLit: a string (adjacent strings merge)
	text  string // the source text (tkLit: "?")
}

func (t token) is(s string) bool { return t.kind == tkOp && t.text == s }

func (t token) word(w string) bool {
	return t.kind == tkWord && len(t.text) == len(w) && strings.EqualFold(t.text, w)
}

// Sanitizer sanitizes query texts, reusing its buffers: one per goroutine.
type Sanitizer struct {
	toks, out []token
	buf       []byte
}

// Sanitize returns text with its literals replaced by ? and its comments
// removed, in the syntax of protocol (postgres, mysql; anything else, such
// as raw, gets the cautious mix).
func Sanitize(protocol, text string) string {
	var s Sanitizer
	return string(s.Append(nil, protocol, text))
}

// Append appends the sanitized text to dst.
func (s *Sanitizer) Append(dst []byte, protocol, text string) []byte {
	s.toks = lex(s.toks[:0], dialectOf(protocol), text)
	s.out = collapse(s.out[:0], s.toks)
	for i, t := range s.out {
		if t.space && i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, t.text...)
	}
	return dst
}

// Fingerprint hashes the sanitized text of a query (FNV-1a, 64 bits), so
// statements that differ only in their literals, comments or white space
// runs have the same fingerprint. JSON shows it as 16 hex digits.
type Fingerprint uint64

func (f Fingerprint) String() string { return fmt.Sprintf("%016x", uint64(f)) }

// MarshalText writes the 16 hex digits.
func (f Fingerprint) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText reads them back.
func (f *Fingerprint) UnmarshalText(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("fingerprint %q: want 16 hex digits", b)
	}
	var raw [8]byte
	if _, err := hex.Decode(raw[:], b); err != nil {
		return fmt.Errorf("fingerprint %q: %w", b, err)
	}
	v := uint64(0)
	for _, c := range raw {
		v = v<<8 | uint64(c)
	}
	*f = Fingerprint(v)
	return nil
}

// Fingerprint of text in protocol's syntax.
func (s *Sanitizer) Fingerprint(protocol, text string) Fingerprint {
	s.buf = s.Append(s.buf[:0], protocol, text)
	return fnv1a(s.buf)
}

// FingerprintOf is Fingerprint with a Sanitizer of its own.
func FingerprintOf(protocol, text string) Fingerprint {
	var s Sanitizer
	return s.Fingerprint(protocol, text)
}

func fnv1a(b []byte) Fingerprint {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime
	}
	return Fingerprint(h)
}

// SanitizeError cuts a server error to its code: PostgreSQL's
// "ERROR 23505: duplicate key value ..." becomes "ERROR 23505", MySQL's
// "ERROR 1062 (23000): Duplicate entry 'x' ..." "ERROR 1062 (23000)": the
// message after the code often quotes the values. Capture's own messages
// (no code, no colon) stay.
func SanitizeError(msg string) string {
	if i := strings.Index(msg, ":"); i >= 0 {
		return strings.TrimSpace(msg[:i])
	}
	return msg
}

func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func identChar(c byte) bool { return identStart(c) || c >= '0' && c <= '9' || c == '$' }

func digit(c byte) bool { return c >= '0' && c <= '9' }

// signKeywords: after these a + or - before a number is its sign.
var signKeywords = []string{"SELECT", "WHERE", "AND", "OR", "NOT", "IN", "VALUES", "VALUE", "SET", "THEN", "ELSE",
	"WHEN", "BETWEEN", "LIMIT", "OFFSET", "RETURN", "BY", "AS", "IS", "LIKE", "ON", "HAVING", "CASE", "DEFAULT", "INTERVAL"}

// signed: a + or - at this point would be a sign, not an operator.
func signed(toks []token) bool {
	if len(toks) == 0 {
		return true
	}
	p := toks[len(toks)-1]
	switch p.kind {
	case tkOp:
		return p.text != ")" && p.text != "]"
	case tkWord:
		for _, k := range signKeywords {
			if p.word(k) {
				return true
			}
		}
	}
	return false
}

// lex appends text's tokens to toks.
func lex(toks []token, d dialect, text string) []token {
	space := false
	emit := func(k tokKind, s string) {
		toks = append(toks, token{kind: k, space: space, text: s})
		space = false
	}
	lit := func(str bool) {
		if str && len(toks) > 0 {
			if p := &toks[len(toks)-1]; p.kind == tkLit && p.str {
				space = false // 'a' 'b': one string
				return
			}
		}
		toks = append(toks, token{kind: tkLit, space: space, str: str, text: "?"})
		space = false
	}
	n := len(text)
	for i := 0; i < n; {
		c := text[i]
		prevIdent := i > 0 && identChar(text[i-1])
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
			i++
		case c == '-' && i+1 < n && text[i+1] == '-', c == '#' && d != dialectPostgres:
			for i < n && text[i] != '\n' {
				i++
			}
			space = true
		case c == '/' && i+1 < n && text[i+1] == '*':
			i = blockComment(text, i, d == dialectPostgres)
			space = true
		case c == '\'':
			i = quoted(text, i, '\'', d != dialectPostgres)
			lit(true)
		case (c == 'e' || c == 'E') && d == dialectPostgres && !prevIdent && i+1 < n && text[i+1] == '\'':
			i = quoted(text, i+1, '\'', true)
			lit(true)
		case (c == 'u' || c == 'U') && d == dialectPostgres && !prevIdent && strings.HasPrefix(text[i+1:], "&'"):
			i = quoted(text, i+2, '\'', false)
			lit(true)
		case i+1 < n && text[i+1] == '\'' && !prevIdent && strings.IndexByte("bBxXnN", c) >= 0:
			i = quoted(text, i+1, '\'', false)
			lit(true)
		case c == '"' && d == dialectPostgres:
			j := quoted(text, i, '"', false)
			emit(tkIdent, text[i:j])
			i = j
		case c == '"':
			i = quoted(text, i, '"', true)
			lit(true)
		case c == '`' && d != dialectPostgres:
			j := quoted(text, i, '`', false)
			emit(tkIdent, text[i:j])
			i = j
		case c == '$' && d != dialectMySQL && i+1 < n && digit(text[i+1]):
			j := i + 1
			for j < n && digit(text[j]) {
				j++
			}
			emit(tkParam, text[i:j])
			i = j
		case c == '$' && d != dialectMySQL && !prevIdent && dollarTag(text[i:]) > 0:
			i = dollarQuoted(text, i)
			lit(true)
		case c == '?' && d != dialectPostgres:
			emit(tkParam, "?")
			i++
		case digit(c) || c == '.' && i+1 < n && digit(text[i+1]):
			i = number(text, i)
			lit(false)
		case (c == '-' || c == '+') && i+1 < n && (digit(text[i+1]) || text[i+1] == '.' && i+2 < n && digit(text[i+2])) && signed(toks):
			i = number(text, i+1)
			lit(false)
		case identStart(c) || c == '$' && d == dialectMySQL:
			j := i + 1
			for j < n && identChar(text[j]) {
				j++
			}
			emit(tkWord, text[i:j])
			i = j
		default:
			emit(tkOp, text[i:i+1])
			i++
		}
	}
	return toks
}

// quoted returns the end of the quoted text starting at text[i] == q: a
// doubled quote is one, backslash escapes when asked. Unterminated: the end.
func quoted(text string, i int, q byte, backslash bool) int {
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			if backslash {
				j++
			}
		case q:
			if j+1 < len(text) && text[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(text)
}

// blockComment returns the end of the /* */ comment at i (nested if asked).
func blockComment(text string, i int, nested bool) int {
	depth := 0
	for j := i; j+1 < len(text); j++ {
		switch {
		case text[j] == '/' && text[j+1] == '*' && (nested || depth == 0):
			depth++
			j++
		case text[j] == '*' && text[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(text)
}

// dollarTag is the length of the $tag$ (or $$) opening s, 0 if none.
func dollarTag(s string) int {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return j + 1
		case identStart(c), j > 1 && digit(c):
		default:
			return 0
		}
	}
	return 0
}

// dollarQuoted returns the end of the dollar-quoted string at i.
func dollarQuoted(text string, i int) int {
	tag := text[i : i+dollarTag(text[i:])]
	if k := strings.Index(text[i+len(tag):], tag); k >= 0 {
		return i + len(tag) + k + len(tag)
	}
	return len(text)
}

// number returns the end of the number at i: decimal with fraction and
// exponent, or 0x/0b/0o with underscores.
func number(text string, i int) int {
	n := len(text)
	if text[i] == '0' && i+2 < n {
		var ok func(byte) bool
		switch text[i+1] {
		case 'x', 'X':
			ok = func(c byte) bool { return digit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '_' }
		case 'b', 'B':
			ok = func(c byte) bool { return c == '0' || c == '1' || c == '_' }
		case 'o', 'O':
			ok = func(c byte) bool { return c >= '0' && c <= '7' || c == '_' }
		}
		if ok != nil && ok(text[i+2]) {
			j := i + 2
			for j < n && ok(text[j]) {
				j++
			}
			return j
		}
	}
	j := i
	for j < n && (digit(text[j]) || text[j] == '_') {
		j++
	}
	if j < n && text[j] == '.' && !(j+1 < n && text[j+1] == '.') { // 1..2 is not a fraction
		j++
		for j < n && (digit(text[j]) || text[j] == '_') {
			j++
		}
	}
	if j+1 < n && (text[j] == 'e' || text[j] == 'E') {
		k := j + 1
		if text[k] == '+' || text[k] == '-' {
			k++
		}
		if k < n && digit(text[k]) {
			for k < n && digit(text[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

// collapse appends ts to out with repeated list elements removed: IN (...)
// and ARRAY[...] elements equal to the one before them, and VALUES rows
// equal to the row before them.
func collapse(out, ts []token) []token {
	for i := 0; i < len(ts); i++ {
		t := ts[i]
		if i > 0 && (t.is("(") && ts[i-1].word("IN") || t.is("[") && ts[i-1].word("ARRAY")) {
			if j := closing(ts, i); j > 0 {
				out = append(out, t)
				out = list(out, ts[i+1:j])
				out = append(out, ts[j])
				i = j
				continue
			}
		}
		if t.word("VALUES") || t.word("VALUE") {
			out = append(out, t)
			i = rows(&out, ts, i+1) - 1
			continue
		}
		out = append(out, t)
	}
	return out
}

// closing is the index of the bracket closing ts[i], -1 if none.
func closing(ts []token, i int) int {
	open, shut := ts[i].text, ")"
	if open == "[" {
		shut = "]"
	}
	depth := 0
	for j := i; j < len(ts); j++ {
		switch {
		case ts[j].is(open):
			depth++
		case ts[j].is(shut):
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// list appends the comma-separated elements of ts, each collapsed, leaving
// out an element equal to the previous one (and its comma). Elements are
// collapsed in place in out and compared there: no allocation.
func list(out, ts []token) []token {
	prev, prevEnd := -1, -1 // the previous element kept, out[prev:prevEnd]
	start, depth := 0, 0
	for j := 0; j <= len(ts); j++ {
		if j < len(ts) {
			switch {
			case ts[j].is("(") || ts[j].is("["):
				depth++
				continue
			case ts[j].is(")") || ts[j].is("]"):
				depth--
				continue
			case !ts[j].is(",") || depth > 0:
				continue
			}
		}
		mark := len(out)
		if prev >= 0 {
			out = append(out, ts[start-1]) // the comma
		}
		el := len(out)
		out = collapse(out, ts[start:j])
		if prev >= 0 && sameTokens(out[el:], out[prev:prevEnd]) {
			out = out[:mark]
		} else {
			prev, prevEnd = el, len(out)
		}
		start = j + 1
	}
	return out
}

// rows appends the VALUES rows starting at ts[i], leaving out a row equal
// to the previous one; it returns the index after the last row.
func rows(out *[]token, ts []token, i int) int {
	prev, prevEnd := -1, -1
	for i < len(ts) && ts[i].is("(") {
		j := closing(ts, i)
		if j < 0 {
			break
		}
		mark := len(*out)
		if prev >= 0 {
			*out = append(*out, ts[i-1]) // the comma
		}
		row := len(*out)
		*out = collapse(*out, ts[i:j+1])
		if prev >= 0 && sameTokens((*out)[row:], (*out)[prev:prevEnd]) {
			*out = (*out)[:mark]
		} else {
			prev, prevEnd = row, len(*out)
		}
		i = j + 1
		if i+1 < len(ts) && ts[i].is(",") && ts[i+1].is("(") {
			i++
			continue
		}
		break
	}
	return i
}

// sameTokens compares token sequences, white space aside.
func sameTokens(a, b []token) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].kind != b[i].kind || a[i].text != b[i].text {
			return false
		}
	}
	return true
}
