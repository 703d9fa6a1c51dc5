package parse

import (
	"strings"
)

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tKeyword
	tInt
	tFloat
	tString
	tOp // punctuation and operators
)

type token struct {
	kind tokKind
	text string // keywords upper-cased; strings unquoted
	pos  Pos
	end  Pos
}

var keywords = map[string]bool{
	"SELECT": true, "FROM": true, "WHERE": true, "GROUP": true, "BY": true, "WINDOW": true,
	"HAVING": true, "ORDER": true, "ASC": true, "DESC": true, "LIMIT": true, "AS": true,
	"AND": true, "OR": true, "NOT": true, "IN": true, "BETWEEN": true, "LIKE": true,
	"DISTINCT": true,
}

func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case isLetter(c):
			j := i
			for j < len(src) && (isLetter(src[j]) || isDigit(src[j])) {
				j++
			}
			w := src[i:j]
			if keywords[strings.ToUpper(w)] {
				toks = append(toks, token{tKeyword, strings.ToUpper(w), Pos(i), Pos(j)})
			} else {
				toks = append(toks, token{tIdent, strings.ToLower(w), Pos(i), Pos(j)})
			}
			i = j
		case isDigit(c):
			j := i
			kind := tInt
			if c == '0' && j+1 < len(src) && (src[j+1] == 'x' || src[j+1] == 'X') {
				j += 2
				for j < len(src) && strings.ContainsRune("0123456789abcdefABCDEF", rune(src[j])) {
					j++
				}
			} else {
				for j < len(src) && isDigit(src[j]) {
					j++
				}
				if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
					kind = tFloat
					j++
					for j < len(src) && isDigit(src[j]) {
						j++
					}
				}
			}
			toks = append(toks, token{kind, src[i:j], Pos(i), Pos(j)})
			i = j
		case c == '\'':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(src) {
					return nil, Errorf(src, Pos(i), "unterminated string literal")
				}
				if src[j] == '\'' {
					if j+1 < len(src) && src[j+1] == '\'' {
						b.WriteByte('\'')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(src[j])
				j++
			}
			toks = append(toks, token{tString, b.String(), Pos(i), Pos(j + 1)})
			i = j + 1
		default:
			two := ""
			if i+1 < len(src) {
				two = src[i : i+2]
			}
			switch two {
			case "<=", ">=", "!=", "<>", "==":
				toks = append(toks, token{tOp, two, Pos(i), Pos(i + 2)})
				i += 2
				continue
			}
			if strings.IndexByte("(),*+-/%<>=;", c) >= 0 {
				toks = append(toks, token{tOp, string(c), Pos(i), Pos(i + 1)})
				i++
				continue
			}
			return nil, Errorf(src, Pos(i), "unexpected character %q", c)
		}
	}
	toks = append(toks, token{tEOF, "", Pos(len(src)), Pos(len(src))})
	return toks, nil
}

func isLetter(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
