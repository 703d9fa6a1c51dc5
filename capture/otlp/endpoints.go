package otlp

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cistern-ebpf/cistern/capture"
)

// kind: client unless capture saw the server's end.
func kind(q capture.Query) trace.SpanKind {
	return trace.SpanKindClient
}

// endpoints are the server.* and client.* attributes of q's connection.
func endpoints(q capture.Query) []attribute.KeyValue {
	return nil
}
