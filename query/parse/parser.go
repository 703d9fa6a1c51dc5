package parse

import (
	"strconv"
	"strings"
	"time"
)

type parser struct {
	src  string
	toks []token
	i    int
}

// Parse parses one SELECT statement.
func Parse(src string) (*Query, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	q, err := p.query()
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) errAt(t token, format string, a ...any) error {
	return Errorf(p.src, t.pos, format, a...)
}

func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "end of query"
	case tString:
		return "'" + t.text + "'"
	}
	return strconv.Quote(t.text)
}

func (p *parser) isKw(kw string) bool {
	t := p.peek()
	return t.kind == tKeyword && t.text == kw
}

func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tOp && t.text == op
}

func (p *parser) acceptKw(kw string) bool {
	if p.isKw(kw) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectKw(kw string) error {
	if !p.acceptKw(kw) {
		return p.errAt(p.peek(), "expected %s, found %s", kw, describe(p.peek()))
	}
	return nil
}

func (p *parser) expectOp(op string) (token, error) {
	if !p.isOp(op) {
		return token{}, p.errAt(p.peek(), "expected %q, found %s", op, describe(p.peek()))
	}
	return p.next(), nil
}

func (p *parser) query() (*Query, error) {
	q := &Query{Src: p.src}
	if err := p.expectKw("SELECT"); err != nil {
		return nil, err
	}
	if p.isOp("*") {
		q.Star = p.next().pos + 1
	} else {
		for {
			it, err := p.selectItem()
			if err != nil {
				return nil, err
			}
			q.Items = append(q.Items, it)
			if !p.isOp(",") {
				break
			}
			p.next()
		}
	}
	if err := p.expectKw("FROM"); err != nil {
		return nil, err
	}
	t := p.next()
	if t.kind != tIdent {
		return nil, p.errAt(t, "expected a table name, found %s", describe(t))
	}
	q.From = Source{Name: t.text, Pos: t.pos, End: t.end}
	if p.isOp("(") {
		p.next()
		for !p.isOp(")") {
			a := p.next()
			if a.kind != tString {
				return nil, p.errAt(a, "table function arguments are string literals, found %s", describe(a))
			}
			q.From.Args = append(q.From.Args, &StrLit{span{a.pos, a.end}, a.text})
			if p.isOp(",") {
				p.next()
			} else if !p.isOp(")") {
				return nil, p.errAt(p.peek(), "expected \",\" or \")\", found %s", describe(p.peek()))
			}
		}
		q.From.End = p.next().end
	}
	var err error
	if p.acceptKw("WHERE") {
		if q.Where, err = p.expr(); err != nil {
			return nil, err
		}
	}
	if p.acceptKw("GROUP") {
		if err := p.expectKw("BY"); err != nil {
			return nil, err
		}
		for {
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			q.GroupBy = append(q.GroupBy, e)
			if !p.isOp(",") {
				break
			}
			p.next()
		}
	}
	if p.isKw("WINDOW") {
		q.WindowPos = p.next().pos
		n := p.next()
		if n.kind != tInt {
			return nil, p.errAt(n, "WINDOW wants a duration like 1s or 500ms, found %s", describe(n))
		}
		u := p.next()
		v, _ := strconv.ParseInt(n.text, 10, 64)
		if u.kind != tIdent || (u.text != "s" && u.text != "ms") || u.pos != n.end {
			return nil, p.errAt(u, "WINDOW duration needs a unit s or ms right after the number")
		}
		d := time.Duration(v) * time.Millisecond
		if u.text == "s" {
			d = time.Duration(v) * time.Second
		}
		if d < 10*time.Millisecond || d > time.Hour {
			return nil, p.errAt(n, "WINDOW must be between 10ms and 3600s")
		}
		q.Window = d
	}
	if p.acceptKw("HAVING") {
		if q.Having, err = p.expr(); err != nil {
			return nil, err
		}
	}
	if p.acceptKw("ORDER") {
		if err := p.expectKw("BY"); err != nil {
			return nil, err
		}
		for {
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			it := OrderItem{Expr: e}
			if p.acceptKw("DESC") {
				it.Desc = true
			} else {
				p.acceptKw("ASC")
			}
			q.OrderBy = append(q.OrderBy, it)
			if !p.isOp(",") {
				break
			}
			p.next()
		}
	}
	if p.isKw("LIMIT") {
		p.next()
		n := p.next()
		v, perr := strconv.ParseInt(n.text, 10, 64)
		if n.kind != tInt || perr != nil || v <= 0 {
			return nil, p.errAt(n, "LIMIT wants a positive integer, found %s", describe(n))
		}
		q.Limit, q.LimitPos = v, n.pos
	}
	if p.isOp(";") {
		p.next()
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errAt(t, "unexpected %s after the query", describe(t))
	}
	return q, nil
}

func (p *parser) selectItem() (SelectItem, error) {
	e, err := p.expr()
	if err != nil {
		return SelectItem{}, err
	}
	s, en := e.Span()
	it := SelectItem{Expr: e, Text: strings.TrimSpace(p.src[s:en])}
	if p.acceptKw("AS") {
		t := p.next()
		if t.kind != tIdent {
			return it, p.errAt(t, "expected a name after AS, found %s", describe(t))
		}
		it.Alias = t.text
	}
	return it, nil
}

func (p *parser) expr() (Expr, error) { return p.or() }

func (p *parser) or() (Expr, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.isKw("OR") {
		p.next()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = bin("OR", l, r)
	}
	return l, nil
}

func (p *parser) and() (Expr, error) {
	l, err := p.not()
	if err != nil {
		return nil, err
	}
	for p.isKw("AND") {
		p.next()
		r, err := p.not()
		if err != nil {
			return nil, err
		}
		l = bin("AND", l, r)
	}
	return l, nil
}

func (p *parser) not() (Expr, error) {
	if p.isKw("NOT") {
		t := p.next()
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		_, e := x.Span()
		return &Unary{span{t.pos, e}, "NOT", x}, nil
	}
	return p.cmp()
}

func bin(op string, l, r Expr) *Binary {
	s, _ := l.Span()
	_, e := r.Span()
	return &Binary{span{s, e}, op, l, r}
}

func (p *parser) cmp() (Expr, error) {
	l, err := p.add()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if t.kind == tOp {
		switch t.text {
		case "=", "==", "!=", "<>", "<", "<=", ">", ">=":
			p.next()
			r, err := p.add()
			if err != nil {
				return nil, err
			}
			op := t.text
			if op == "==" {
				op = "="
			} else if op == "<>" {
				op = "!="
			}
			return bin(op, l, r), nil
		}
	}
	not := false
	if p.isKw("NOT") {
		nt := p.toks[p.i+1]
		if nt.kind == tKeyword && (nt.text == "IN" || nt.text == "BETWEEN" || nt.text == "LIKE") {
			p.next()
			not = true
		}
	}
	s, _ := l.Span()
	switch {
	case p.acceptKw("IN"):
		if _, err := p.expectOp("("); err != nil {
			return nil, err
		}
		var list []Expr
		for {
			e, err := p.add()
			if err != nil {
				return nil, err
			}
			list = append(list, e)
			if !p.isOp(",") {
				break
			}
			p.next()
		}
		end, err := p.expectOp(")")
		if err != nil {
			return nil, err
		}
		return &In{span{s, end.end}, l, list, not}, nil
	case p.acceptKw("BETWEEN"):
		lo, err := p.add()
		if err != nil {
			return nil, err
		}
		if err := p.expectKw("AND"); err != nil {
			return nil, err
		}
		hi, err := p.add()
		if err != nil {
			return nil, err
		}
		_, e := hi.Span()
		return &Between{span{s, e}, l, lo, hi, not}, nil
	case p.acceptKw("LIKE"):
		t := p.next()
		if t.kind != tString {
			return nil, p.errAt(t, "LIKE wants a string pattern, found %s", describe(t))
		}
		return &Like{span{s, t.end}, l, &StrLit{span{t.pos, t.end}, t.text}, not}, nil
	}
	if not {
		return nil, p.errAt(p.peek(), "expected IN, BETWEEN or LIKE after NOT")
	}
	return l, nil
}

func (p *parser) add() (Expr, error) {
	l, err := p.mul()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().text
		r, err := p.mul()
		if err != nil {
			return nil, err
		}
		l = bin(op, l, r)
	}
	return l, nil
}

func (p *parser) mul() (Expr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("%") {
		op := p.next().text
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		l = bin(op, l, r)
	}
	return l, nil
}

func (p *parser) unary() (Expr, error) {
	if p.isOp("-") {
		t := p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		_, e := x.Span()
		if lit, ok := x.(*IntLit); ok {
			return &IntLit{span{t.pos, e}, -lit.V}, nil
		}
		return &Unary{span{t.pos, e}, "-", x}, nil
	}
	return p.primary()
}

var aggregates = map[string]bool{"COUNT": true, "SUM": true, "MIN": true, "MAX": true, "AVG": true, "HIST": true, "QUANTILE": true}

func (p *parser) primary() (Expr, error) {
	t := p.next()
	switch t.kind {
	case tInt:
		v, err := strconv.ParseInt(t.text, 0, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(t.text, 0, 64)
			if uerr != nil {
				return nil, p.errAt(t, "integer %s does not fit in 64 bits", t.text)
			}
			v = int64(u)
		}
		return &IntLit{span{t.pos, t.end}, v}, nil
	case tFloat:
		v, _ := strconv.ParseFloat(t.text, 64)
		return &FloatLit{span{t.pos, t.end}, v}, nil
	case tString:
		return &StrLit{span{t.pos, t.end}, t.text}, nil
	case tIdent:
		if !p.isOp("(") {
			return &Col{span{t.pos, t.end}, t.text}, nil
		}
		name := strings.ToUpper(t.text)
		if !aggregates[name] {
			return nil, p.errAt(t, "unknown function %s (functions: COUNT, SUM, MIN, MAX, AVG, HIST, QUANTILE)", t.text)
		}
		p.next()
		c := &Call{Name: name}
		if p.isOp("*") {
			st := p.next()
			if name != "COUNT" {
				return nil, p.errAt(st, "only COUNT takes *")
			}
			c.Star = true
		} else {
			if p.acceptKw("DISTINCT") {
				if name != "COUNT" {
					return nil, p.errAt(t, "only COUNT takes DISTINCT")
				}
				c.Distinct = true
			}
			for {
				e, err := p.expr()
				if err != nil {
					return nil, err
				}
				c.Args = append(c.Args, e)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
		}
		end, err := p.expectOp(")")
		if err != nil {
			return nil, err
		}
		c.span = span{t.pos, end.end}
		return c, nil
	case tOp:
		if t.text == "(" {
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			end, err := p.expectOp(")")
			if err != nil {
				return nil, err
			}
			// keep the parentheses in the span so SQL text round-trips
			return widen(e, t.pos, end.end), nil
		}
	}
	return nil, p.errAt(t, "expected an expression, found %s", describe(t))
}

// widen makes e's span cover the surrounding parentheses. e was just
// parsed and nothing else refers to it, so it is changed in place.
func widen(e Expr, s, en Pos) Expr {
	if x, ok := e.(interface{ setSpan(span) }); ok {
		x.setSpan(span{s, en})
	}
	return e
}
