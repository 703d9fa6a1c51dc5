package capture

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSanitize(t *testing.T) {
	for _, c := range []struct{ proto, in, want string }{
		// strings, with their escapes
		{"postgres", "SELECT * FROM users WHERE name = 'alice' AND id = 42", "SELECT * FROM users WHERE name = ? AND id = ?"},
		{"postgres", "SELECT 'it''s' || 'x'", "SELECT ? || ?"},
		{"postgres", `SELECT 'C:\' AS dir, 7`, `SELECT ? AS dir, ?`}, // standard_conforming_strings: \ is a character
		{"postgres", `SELECT E'it\'s \\ secret', e'x'`, `SELECT ?, ?`},
		{"postgres", `SELECT U&'d\0061t\+000061', B'0101', X'1F', N'nat'`, `SELECT ?, ?, ?, ?`},
		{"postgres", "SELECT 'a'\n  'b' FROM t", "SELECT ? FROM t"},
		{"postgres", "SELECT $$it's $1 'quoted'$$, $fn$ body $$ inner $$ $fn$ FROM t", "SELECT ?, ? FROM t"},
		{"postgres", "SELECT a$b, $1, $23 FROM t WHERE c = $2", "SELECT a$b, $1, $23 FROM t WHERE c = $2"},
		{"postgres", `SELECT "Weird ""col""", "x" FROM "T"`, `SELECT "Weird ""col""", "x" FROM "T"`},
		{"mysql", `SELECT "double", 'it\'s', 'a''b' FROM t`, `SELECT ?, ?, ? FROM t`},
		{"mysql", "SELECT `col`, `we``ird` FROM `t` WHERE x = ?", "SELECT `col`, `we``ird` FROM `t` WHERE x = ?"},
		{"mysql", `SELECT _utf8mb4'x', x'4142', 0x4142, b'01', 0b01`, `SELECT _utf8mb4?, ?, ?, ?, ?`},
		{"mysql", `SELECT 'unterminated \' still, secret`, `SELECT ?`},
		{"postgres", `SELECT 'unterminated`, `SELECT ?`},
		{"postgres", `SELECT $q$ never closed`, `SELECT ?`},
		// numbers, signs and what only looks like them
		{"postgres", "SELECT 1.5, .5, 1e10, 2.5E-3, 1_000_000, 0x1F, 0o17, 0b101 FROM t1", "SELECT ?, ?, ?, ?, ?, ?, ?, ? FROM t1"},
		{"postgres", "SELECT -1, x-1, x - -2, f(-3), (a)-4, col2 FROM t WHERE a=-5 AND b > +6", "SELECT ?, x-?, x - ?, f(?), (a)-?, col2 FROM t WHERE a=? AND b > ?"},
		{"postgres", "SELECT '5'::int, t.c2, arr[1:2] FROM s.t", "SELECT ?::int, t.c2, arr[?:?] FROM s.t"},
		// lists
		{"postgres", "SELECT * FROM t WHERE id IN (1, 2, 3) AND s in ('a','b')", "SELECT * FROM t WHERE id IN (?) AND s in (?)"},
		{"postgres", "SELECT * FROM t WHERE id IN (1, NULL, 2)", "SELECT * FROM t WHERE id IN (?, NULL, ?)"},
		{"postgres", "SELECT * FROM t WHERE (a, b) IN ((1, 'x'), (2, 'y'))", "SELECT * FROM t WHERE (a, b) IN ((?, ?))"},
		{"postgres", "SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE k IN (1,2))", "SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE k IN (?))"},
		{"postgres", "SELECT * FROM t WHERE id = ANY(ARRAY[1, 2, 3])", "SELECT * FROM t WHERE id = ANY(ARRAY[?])"},
		{"postgres", "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'), (3, DEFAULT) RETURNING a", "INSERT INTO t (a, b) VALUES (?, ?), (?, DEFAULT) RETURNING a"},
		{"mysql", "INSERT INTO t VALUES (1,'a'),(2,'b') ON DUPLICATE KEY UPDATE b = VALUES(b)", "INSERT INTO t VALUES (?,?) ON DUPLICATE KEY UPDATE b = VALUES(b)"},
		{"mysql", "SELECT * FROM t WHERE id IN (?, ?, ?)", "SELECT * FROM t WHERE id IN (?)"},
		{"postgres", "SELECT f(1, 2)", "SELECT f(?, ?)"}, // not a list: arguments keep their number
		// comments and white space
		{"postgres", "SELECT /* the secret: 'x' */ a -- and 'y'\nFROM t", "SELECT a FROM t"},
		{"postgres", "SELECT /* outer /* nested */ still comment */ 1", "SELECT ?"},
		{"mysql", "SELECT 1 # secret\n, a/*x*/b FROM t", "SELECT ? , a b FROM t"},
		{"postgres", "SELECT a #> '{x}' FROM t", "SELECT a #> ? FROM t"}, // # is an operator in PostgreSQL
		{"postgres", "  SELECT\n\t1  ;  ", "SELECT ? ;"},
		// passwords
		{"postgres", "ALTER ROLE app PASSWORD 'hunter2'", "ALTER ROLE app PASSWORD ?"},
		{"postgres", "CREATE ROLE bob LOGIN PASSWORD 'SCRAM-SHA-256$4096:abc$def' VALID UNTIL '2030-01-01'", "CREATE ROLE bob LOGIN PASSWORD ? VALID UNTIL ?"},
		{"mysql", "CREATE USER 'bob'@'%' IDENTIFIED BY 's3cr\\'et'", "CREATE USER ?@? IDENTIFIED BY ?"},
		// raw: the cautious mix
		{"raw", `get key:1 "quoted" 'x\'y' # rest`, `get key:? ?`}, // adjacent strings: one ?
		{"raw", "GET /x?id=7&tok=$$abc$$ HTTP/1.1", "GET /x?id=?&tok=? HTTP/?"},
	} {
		if got := Sanitize(c.proto, c.in); got != c.want {
			t.Errorf("%s %q:\n got %q\nwant %q", c.proto, c.in, got, c.want)
		}
		// Sanitizing again changes nothing.
		if again := Sanitize(c.proto, c.want); c.proto != "raw" && again != c.want {
			t.Errorf("%s %q sanitized twice: %q", c.proto, c.want, again)
		}
	}
}

func TestSanitizeHidesSecrets(t *testing.T) {
	secrets := []string{"hunter2", "alice", "4111111111111111", "0xdeadbeef"}
	for _, proto := range []string{"postgres", "mysql", "raw"} {
		for _, q := range []string{
			"ALTER ROLE app WITH PASSWORD 'hunter2'",
			"SELECT * FROM cards WHERE owner = 'alice' AND number = 4111111111111111",
			"UPDATE t SET blob = 0xdeadbeef, note = 'alice'",
			"SELECT 1 /* alice */ -- hunter2",
			`SELECT "alice"`,
			"SELECT $tag$alice$tag$", // MySQL: an identifier
			"SELECT E'al\\'ice', 'hunter2",
		} {
			got := Sanitize(proto, q)
			for _, s := range secrets {
				if strings.Contains(got, s) && !(proto == "postgres" && strings.Contains(q, `"alice"`)) && !(proto == "mysql" && strings.Contains(q, "$tag$")) {
					t.Errorf("%s: %q sanitized to %q still holds %q", proto, q, got, s)
				}
			}
		}
	}
}

func TestFingerprint(t *testing.T) {
	same := [][2]string{
		{"SELECT * FROM t WHERE id = 1", "SELECT * FROM t WHERE id = 987654"},
		{"SELECT * FROM t WHERE name = 'a'", "SELECT * FROM t WHERE name = 'a much longer value'"},
		{"SELECT * FROM t WHERE id IN (1, 2)", "SELECT * FROM t WHERE id IN (3, 4, 5, 6)"},
		{"INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b'), (3, 'c')"},
		{"SELECT 1 -- first", "SELECT   2 /* second */"},
		{"ALTER ROLE app PASSWORD 'one'", "ALTER ROLE app PASSWORD 'two'"},
	}
	for _, p := range same {
		if a, b := FingerprintOf("postgres", p[0]), FingerprintOf("postgres", p[1]); a != b {
			t.Errorf("%q %v, %q %v: want equal", p[0], a, p[1], b)
		}
	}
	differ := [][2]string{
		{"SELECT * FROM t WHERE id = 1", "SELECT * FROM u WHERE id = 1"},
		{"SELECT a FROM t", "SELECT b FROM t"},
		{"SELECT * FROM t WHERE id IN (1)", "SELECT * FROM t WHERE id IN (1, NULL)"},
	}
	for _, p := range differ {
		if FingerprintOf("postgres", p[0]) == FingerprintOf("postgres", p[1]) {
			t.Errorf("%q and %q: same fingerprint", p[0], p[1])
		}
	}
	// FNV-1a 64 of the sanitized text, the known vector for "a".
	if got := fnv1a([]byte("a")); got != 0xaf63dc4c8601ec8c {
		t.Errorf("fnv1a(a) = %v", got)
	}
	if got, want := FingerprintOf("postgres", "SELECT 1"), fnv1a([]byte("SELECT ?")); got != want {
		t.Errorf("fingerprint %v, want fnv1a(SELECT ?) %v", got, want)
	}
	// JSON: 16 hex digits, and back.
	q := Query{Fingerprint: 0x00ab}
	b, err := json.Marshal(q)
	if err != nil || !strings.Contains(string(b), `"fingerprint":"00000000000000ab"`) {
		t.Fatalf("%s %v", b, err)
	}
	var back Query
	if err := json.Unmarshal(b, &back); err != nil || back.Fingerprint != q.Fingerprint {
		t.Errorf("back: %v %v", back.Fingerprint, err)
	}
}

func TestSanitizeError(t *testing.T) {
	for in, want := range map[string]string{
		`ERROR 23505: duplicate key value violates unique constraint "u_email"`: "ERROR 23505",
		`ERROR 1062 (23000): Duplicate entry 'bob@example.com' for key 'email'`: "ERROR 1062 (23000)",
		"connection closed before the answer":                                   "connection closed before the answer",
		"":                                                                      "",
	} {
		if got := SanitizeError(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// The sanitizer runs on every captured record (for its fingerprint).
func BenchmarkFingerprint(b *testing.B) {
	var s Sanitizer
	q := "SELECT a, b, c FROM accounts WHERE id = 12345 AND name = 'someone' AND kind IN (1, 2, 3) ORDER BY a LIMIT 10"
	b.SetBytes(int64(len(q)))
	for i := 0; i < b.N; i++ {
		s.Fingerprint("postgres", q)
	}
}

// FuzzSanitize: any text sanitizes without panicking, and a value quoted
// the way each dialect quotes strings never survives, whatever it holds.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"hunter2", "it's", `back\slash`, "$$", "*/ -- #", "\x00\xff", "'; DROP TABLE x; --"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, proto := range []string{"postgres", "mysql", "raw"} {
			Sanitize(proto, v)
			Sanitize(proto, "SELECT * FROM t WHERE a = "+v)
		}
		secret := "ZQX" + v + "QXZ"
		pg := "SELECT * FROM t WHERE a = '" + strings.ReplaceAll(secret, "'", "''") + "' AND b = 1"
		if got := Sanitize("postgres", pg); strings.Contains(got, "ZQX") || strings.Contains(got, "QXZ") {
			t.Errorf("postgres %q: %q", pg, got)
		}
		my := "SELECT * FROM t WHERE a = '" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(secret) + "' AND b = 1"
		if got := Sanitize("mysql", my); strings.Contains(got, "ZQX") || strings.Contains(got, "QXZ") {
			t.Errorf("mysql %q: %q", my, got)
		}
	})
}
