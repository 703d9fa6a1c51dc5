package main

import (
	"errors"

	"github.com/cistern-ebpf/cistern/capture/otlp"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/kv"
	"github.com/cistern-ebpf/cistern/query"
	"github.com/cistern-ebpf/cistern/query/exporter"
)

// exitCode maps an error to the exit status (README: 0 ok, 1 runtime, 2
// usage). Packages return their own typed errors for input that is wrong;
// this is where they become usage errors, beside cmd's own cli.UsageError.
func exitCode(err error) int {
	if err == nil {
		return cli.ExitOK
	}
	if isUsage(err) {
		return cli.ExitUsage
	}
	return cli.ExitRuntime
}

func isUsage(err error) bool {
	return errors.As(err, new(cli.UsageError)) ||
		errors.As(err, new(*query.Error)) || // a query's syntax or meaning
		errors.As(err, new(*query.OptionError)) ||
		errors.As(err, new(*exporter.ConfigError)) ||
		errors.As(err, new(*otlp.OptionError)) ||
		errors.As(err, new(*metrics.AddrError)) ||
		errors.As(err, new(*kv.NativePeerError))
}
