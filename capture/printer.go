package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// The record loop of `cistern capture`: the capture's queries printed as a
// table or JSON lines (their text sanitized if asked), handed to a sink (the
// OTLP exporter), until the context ends or the selected process has exited
// and its last records are read; then the channel's loss counters.

// Formats of PrintOptions.Format.
const (
	FormatTable = "table"
	FormatJSON  = "json"
)

// PrintOptions of Print.
type PrintOptions struct {
	Format   string // FormatTable (default) or FormatJSON
	Sanitize bool   // the records carry the sanitized text and the error's code
	// Send gets every query (not unread records), before sanitizing; it must
	// not block (the OTLP exporter queues or drops).
	Send func(Query)
	// Summary, if set, counts every query and is written to out at the end.
	Summary *Summary
}

// Print prints cp's records to out until ctx ends or, with Opt.PID, the
// process has exited and one more idle wait found nothing; then writes the
// summary line (queries, channel, losses) to errOut.
func Print(ctx context.Context, cp *Capture, out, errOut io.Writer, o PrintOptions) error {
	var tw *tabwriter.Writer
	if o.Format != FormatJSON {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tPID\tTID\tCOMM\tSIDE\tLOCAL\tREMOTE\tTRANSPORT\tLIBRARY\tLATENCY_US\tROWS\tFINGERPRINT\tQUERY\tERROR")
		tw.Flush()
	}
	enc := json.NewEncoder(out)
	var san Sanitizer
	n := 0
	gone := false
	for ctx.Err() == nil {
		qs, err := cp.Next(200 * time.Millisecond)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if cp.Opt.PID == 0 {
				continue
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", cp.Opt.PID)); err != nil {
				if gone { // one more idle round after the exit: drained
					break
				}
				gone = true
			}
			continue
		}
		if err != nil {
			return err
		}
		for _, q := range qs {
			if !q.Unread { // an unread connection is no query (no span)
				n++
				if o.Send != nil {
					o.Send(q)
				}
				if o.Summary != nil {
					o.Summary.Add(&q)
				}
				if o.Sanitize {
					q.Query = string(san.Append(nil, q.Protocol, q.Query))
					q.Error = SanitizeError(q.Error)
				}
			}
			if tw == nil {
				if err := enc.Encode(q); err != nil {
					return err
				}
				continue
			}
			printRow(tw, &q)
			tw.Flush()
		}
	}
	if o.Summary != nil {
		if tw != nil {
			fmt.Fprintln(out)
		}
		if err := o.Summary.Write(out, o.Format); err != nil {
			return err
		}
	}
	st, err := cp.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "%d queries; channel: %d records, %d payload bytes, %.3f ring bytes/payload byte; "+
		"lost: %d records, %d bytes (busy %d, table full %d, faults %d), %d sequence gaps; %d unparseable protocol bytes skipped; "+
		"%d TLS connections unread; %d processes held past --hold-max, %d supervisors continued\n",
		n, st.Records, st.PayloadBytes, st.RingPerPayload(), st.LostRecords, st.LostBytes,
		st.BusyDrops, st.NoConn, st.Faults, len(cp.Gaps()), cp.BadBytes(), cp.Unread(), cp.HoldTimeouts(), cp.nSupervisors.Load())
	return nil
}

// printRow writes q as a table row.
func printRow(tw io.Writer, q *Query) {
	if q.Unread {
		fmt.Fprintf(tw, "%s\t%d\t-\t%s\t-\t%s\t%s\t%s\t-\t-\t-\t-\t(unread TLS connection: %s, %d bytes sent, %d received)\t\n",
			q.Time.Format("15:04:05.000000"), q.PID, q.Comm, dash(q.Local), dash(q.Remote), q.Transport,
			q.UnreadReason, q.BytesSent, q.BytesReceived)
		return
	}
	lat := fmt.Sprintf("%.0f", q.LatencyUS)
	if !q.LatencyExact {
		lat = "<=" + lat
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.Time.Format("15:04:05.000000"),
		q.PID, q.TID, q.Comm, q.Side, dash(q.Local), dash(q.Remote), q.Transport, q.Library, lat, q.Rows,
		q.Fingerprint, oneLine(q.Query), q.Error)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
