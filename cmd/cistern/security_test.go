package main

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exposure are the flags that open something to other processes or
// machines: listening addresses, sockets, and where captured data goes.
var exposure = map[string]bool{"metrics": true, "listen": true, "serve": true, "socket": true, "otlp": true, "out": true}

// listening are those of exposure that listen on TCP.
var listening = map[string]bool{"metrics": true, "listen": true, "serve": true}

// eachFlag calls fn for every flag of every command under c.
func eachFlag(c *cobra.Command, fn func(path string, f *pflag.Flag)) {
	c.LocalFlags().VisitAll(func(f *pflag.Flag) { fn(c.CommandPath(), f) })
	for _, sub := range c.Commands() {
		eachFlag(sub, fn)
	}
}

// TestListenDefaults: no command listens anywhere unless told, and when a
// listening flag has a default it is a loopback address; any HOST:PORT
// default at all is loopback. Every flag that listens, makes a socket,
// sends captured data away or writes it to a file is listed in
// docs/security.md, on a line naming its command.
func TestListenDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	n := 0
	eachFlag(newRoot(), func(path string, f *pflag.Flag) {
		def := f.DefValue
		if host, port, err := net.SplitHostPort(def); err == nil && port != "" || listening[f.Name] && def != "" {
			n++
			if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
				t.Errorf("%s --%s: default %q is not a loopback address", path, f.Name, def)
			}
		}
		if !exposure[f.Name] || strings.HasPrefix(path, "cistern bench") || strings.HasPrefix(path, "cistern demo") {
			return
		}
		cmd := "`" + path + "`"
		for _, l := range lines {
			if strings.Contains(l, cmd) && strings.Contains(l, "--"+f.Name) {
				return
			}
		}
		t.Errorf("docs/security.md has no line naming %s and --%s (default %q)", cmd, f.Name, def)
	})
	if n == 0 {
		t.Error("no command has a listening default: the walk found nothing to check (exporter --listen has one)")
	}
}
