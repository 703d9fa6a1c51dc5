package otlp

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cistern-ebpf/cistern/capture"
)

// system is db.system.name for a capture protocol.
func system(protocol string) string {
	switch protocol {
	case "postgres":
		return "postgresql"
	case "mysql":
		return "mysql"
	}
	return "other_sql"
}

// operation is db.operation.name: the statement's first keyword.
func operation(text string) string {
	f := strings.Fields(text)
	if len(f) == 0 {
		return ""
	}
	return strings.ToUpper(strings.TrimRight(f[0], ";("))
}

// errorType is the SQLSTATE (PostgreSQL "ERROR 42P01: ...") or MySQL error
// number of an error answer, else "error".
func errorType(msg string) string {
	f := strings.Fields(msg)
	if len(f) >= 2 {
		return strings.TrimSuffix(f[1], ":")
	}
	return "error"
}

// Attributes are q's span attributes (OpenTelemetry database conventions),
// q's text as it is (span sanitizes it first unless told otherwise), and
// its fingerprint as cistern.query.fingerprint.
func Attributes(q capture.Query) []attribute.KeyValue {
	a := []attribute.KeyValue{
		attribute.String("db.system.name", system(q.Protocol)),
		attribute.String("db.query.text", q.Query),
		attribute.Int64("db.response.returned_rows", q.Rows),
		attribute.Int64("process.pid", int64(q.PID)),
	}
	if q.Fingerprint == 0 && q.Query != "" { // not from capture.Capture.Next
		q.Fingerprint = capture.FingerprintOf(q.Protocol, q.Query)
	}
	if q.Fingerprint != 0 { // 0: no statement (an unread connection's record)
		a = append(a, attribute.String("cistern.query.fingerprint", q.Fingerprint.String()))
	}
	if op := operation(q.Query); op != "" {
		a = append(a, attribute.String("db.operation.name", op))
	}
	if q.Database != "" {
		a = append(a, attribute.String("db.namespace", q.Database))
	}
	if q.User != "" {
		a = append(a, attribute.String("db.user", q.User))
	}
	if q.UserUnknown != "" { // why db.user is missing
		a = append(a, attribute.String("cistern.db.user_unknown", q.UserUnknown))
	}
	if q.Error != "" {
		a = append(a, attribute.String("error.type", errorType(q.Error)))
	}
	return append(a, endpoints(q)...)
}

// span records q: start and end are the query's first byte and its
// answer's last (capture's per-turn times).
func (e *Exporter) span(q capture.Query) {
	if !e.raw {
		if q.Fingerprint == 0 && q.Query != "" {
			q.Fingerprint = e.san.Fingerprint(q.Protocol, q.Query)
		}
		q.Query = string(e.san.Append(nil, q.Protocol, q.Query))
		q.Error = capture.SanitizeError(q.Error)
	}
	start := q.Time
	end := start.Add(time.Duration(q.LatencyUS * 1e3))
	name := operation(q.Query)
	if name == "" {
		name = system(q.Protocol)
	}
	if q.Database != "" {
		name += " " + q.Database
	}
	_, sp := e.tr.Start(context.Background(), name, trace.WithTimestamp(start), trace.WithSpanKind(kind(q)), trace.WithAttributes(Attributes(q)...))
	if q.Error != "" {
		sp.SetStatus(codes.Error, q.Error)
	}
	sp.End(trace.WithTimestamp(end))
}
