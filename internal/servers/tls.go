package servers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// TLSCert is a throwaway self-signed certificate for 127.0.0.1, readable by
// the postgres user (PostgreSQL refuses a key others can read).
type TLSCert struct {
	Dir, Cert, Key string
}

// NewTLSCert makes one with openssl in a fresh directory.
func NewTLSCert() (*TLSCert, error) {
	if _, err := exec.LookPath("openssl"); err != nil {
		return nil, fmt.Errorf("openssl %w: run sudo make deps", ErrNotInstalled)
	}
	dir, err := os.MkdirTemp("", "cistern-tls-")
	if err != nil {
		return nil, err
	}
	c := &TLSCert{Dir: dir, Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	fail := func(err error) (*TLSCert, error) { os.RemoveAll(dir); return nil, err }
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
		"-subj", "/CN=127.0.0.1", "-keyout", c.Key, "-out", c.Cert).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("openssl: %v: %s", err, out))
	}
	if out, err := exec.Command("chown", "postgres:postgres", c.Cert, c.Key).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("chown: %v: %s", err, out))
	}
	if err := os.Chmod(c.Key, 0o600); err != nil {
		return fail(err)
	}
	return c, nil
}

// PostgresConf is the PostgreSQL configuration that serves TLS with it.
func (c *TLSCert) PostgresConf() map[string]string {
	return map[string]string{"ssl": "on", "ssl_cert_file": c.Cert, "ssl_key_file": c.Key}
}

// Remove deletes the files.
func (c *TLSCert) Remove() { os.RemoveAll(c.Dir) }
