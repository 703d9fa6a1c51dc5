// Command pgclient is a Go PostgreSQL client (lib/pq) for the capture
// tests: once a line arrives on its standard input it opens one TLS and
// one plaintext connection at once and sends -n marked queries on each,
// concurrently, so one process holds both kinds of connection. Go's
// crypto/tls carries the TLS one, not libssl. -now: start at once, without
// waiting for a line (a client that queries right after exec); -modes: the
// connections to open (tls,plain).
package main

import (
	"bufio"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	_ "github.com/lib/pq"
)

func main() {
	port := flag.Int("port", 5432, "PostgreSQL port on 127.0.0.1")
	n := flag.Int("n", 20, "queries per connection")
	tok := flag.String("tok", "x", "marker token")
	now := flag.Bool("now", false, "query at once (do not wait for a line on standard input)")
	modes := flag.String("modes", "tls,plain", "connections to open: tls, plain or both")
	flag.Parse()
	if !*now {
		bufio.NewReader(os.Stdin).ReadString('\n') // the capture is attached
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, mode := range strings.Split(*modes, ",") {
		ssl := map[string]string{"tls": "require", "plain": "disable"}[mode]
		db, err := sql.Open("postgres", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=%s", *port, ssl))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		db.SetMaxOpenConns(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer db.Close()
			for i := 0; i < *n; i++ {
				var s string
				if err := db.QueryRow(fmt.Sprintf("SELECT 'g-%s-%s-%d' AS mark", *tok, mode, i)).Scan(&s); err != nil {
					errs <- fmt.Errorf("%s query %d: %w", mode, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
