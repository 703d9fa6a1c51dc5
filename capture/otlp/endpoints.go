package otlp

import (
	"net"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cistern-ebpf/cistern/capture"
)

// kind: the server's end of a connection gives a server span, the client's
// (or an unknown side) a client span.
func kind(q capture.Query) trace.SpanKind {
	if q.Side == "server" {
		return trace.SpanKindServer
	}
	return trace.SpanKindClient
}

// endpoints are the server.* and client.* attributes: the server is the
// remote end for a client-side record and the local one for a server-side
// record.
func endpoints(q capture.Query) []attribute.KeyValue {
	server, client := q.Remote, q.Local
	if q.Side == "server" {
		server, client = q.Local, q.Remote
	}
	var a []attribute.KeyValue
	if h, p, err := net.SplitHostPort(server); err == nil {
		a = append(a, attribute.String("server.address", h))
		if n, err := strconv.Atoi(p); err == nil {
			a = append(a, attribute.Int("server.port", n))
		}
	}
	if h, p, err := net.SplitHostPort(client); err == nil {
		a = append(a, attribute.String("client.address", h))
		if n, err := strconv.Atoi(p); err == nil {
			a = append(a, attribute.Int("client.port", n))
		}
	}
	if q.Transport != "" {
		a = append(a, attribute.String("cistern.transport", q.Transport))
	}
	if q.Library != "" {
		a = append(a, attribute.String("cistern.tls.library", q.Library))
	}
	if q.Comm != "" {
		a = append(a, attribute.String("process.executable.name", q.Comm))
	}
	return a
}
