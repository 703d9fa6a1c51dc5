// Package parse turns query text into an AST whose nodes carry their
// positions, so later stages can point at the offending text.
package parse

import "time"

// Expr is an expression node.
type Expr interface {
	Span() (Pos, Pos) // start and end offsets in the source
}

type span struct{ P, E Pos }

func (s span) Span() (Pos, Pos) { return s.P, s.E }

func (s *span) setSpan(n span) { *s = n }

type (
	// IntLit is an integer literal.
	IntLit struct {
		span
		V int64
	}
	// FloatLit appears only as QUANTILE's fraction.
	FloatLit struct {
		span
		V float64
	}
	// StrLit is a string literal.
	StrLit struct {
		span
		V string
	}
	// Col names a column.
	Col struct {
		span
		Name string
	}
	// Binary is an arithmetic, comparison or logical operator.
	Binary struct {
		span
		Op   string // + - * / % = != < <= > >= AND OR
		L, R Expr
	}
	// Unary is NOT or unary minus.
	Unary struct {
		span
		Op string
		X  Expr
	}
	// Call is an aggregate call.
	Call struct {
		span
		Name     string // upper case
		Args     []Expr
		Star     bool // COUNT(*)
		Distinct bool
	}
	// In is x [NOT] IN (list).
	In struct {
		span
		X    Expr
		List []Expr
		Not  bool
	}
	// Between is x [NOT] BETWEEN lo AND hi.
	Between struct {
		span
		X, Lo, Hi Expr
		Not       bool
	}
	// Like is x [NOT] LIKE 'prefix%'.
	Like struct {
		span
		X       Expr
		Pattern *StrLit
		Not     bool
	}
)

// SelectItem is one output column.
type SelectItem struct {
	Expr  Expr
	Alias string
	Text  string // the SQL text of Expr, the column's name without alias
}

// Source is the FROM clause: a table, or uprobe('bin', 'sym').
type Source struct {
	Name     string
	Args     []*StrLit
	Pos, End Pos
}

// OrderItem is one ORDER BY key.
type OrderItem struct {
	Expr Expr
	Desc bool
}

// Query is a parsed SELECT.
type Query struct {
	Src       string
	Items     []SelectItem
	Star      Pos // >0 when SELECT * (position+1)
	From      Source
	Where     Expr
	GroupBy   []Expr
	Window    time.Duration
	WindowPos Pos
	Having    Expr
	OrderBy   []OrderItem
	Limit     int64
	LimitPos  Pos
}
