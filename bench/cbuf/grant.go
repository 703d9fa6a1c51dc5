package cbufbench

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// cbufGrantModes: grant_xuid sends 1-page messages to a receiver running
// as nobody (the owner exports and grants each buffer); export_same_uid is
// the same per-buffer path within one uid; pool_same_uid is the whole-pool
// path components of one uid use (today's API).
var cbufGrantModes = []string{"grant_xuid", "export_same_uid", "pool_same_uid"}

var cbufGrantCols = []string{"first_receipt_us", "repeat_receipt_ns", "alloc_us", "grant_send_us", "message_us"}

// cbufGrant measures what isolation across uids costs (#29): the first
// receipt of a buffer (mapping it: a round trip to the manager, an mmap and
// the first touch) against a repeated one, the owner's alloc (an exporting
// owner maps each new buffer once) and grant, and a whole message.
func cbufGrant(ctx context.Context, rep *benchkit.Report, opt Options, tmp, peer string) error {
	iters := 3000
	if opt.Quick {
		iters = 600
	}
	modes := cbufGrantModes
	if os.Geteuid() != 0 {
		modes = modes[1:]
		rep.Note("grant_xuid skipped: the receiver runs as nobody, which needs root")
	}
	// the receiver as nobody reaches the socket through the group and a
	// traversable directory
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	err := benchkit.Interleave(ctx, cbufRounds(opt), modes, func(s string) { opt.Progress("grant: " + s) },
		func(ctx context.Context, _ int, mode string) error {
			arg := map[string]string{"grant_xuid": "xuid", "export_same_uid": "export", "pool_same_uid": "pool"}[mode]
			return withManager(ctx, tmp, cbuf.ManagerOptions{Memory: 64 << 20, Group: "65534", Interval: time.Hour}, func(sock string, _ *cbuf.Manager) error {
				kv, err := runKV(ctx, nil, peer, "grant", sock, arg, strconv.Itoa(iters))
				if err != nil {
					return err
				}
				rep.Sample(mode, "first_receipt_us", kv["first_receipt_ns"]/1e3)
				rep.Sample(mode, "repeat_receipt_ns", kv["repeat_receipt_ns"])
				rep.Sample(mode, "alloc_us", kv["alloc_ns"]/1e3)
				rep.Sample(mode, "grant_send_us", kv["grant_send_ns"]/1e3)
				rep.Sample(mode, "message_us", kv["message_ns"]/1e3)
				return nil
			})
		})
	if err != nil {
		return err
	}
	rep.Note("grant: medians over " + strconv.Itoa(iters) + " one-page messages per round; a granted buffer is destroyed when dead, so every cross-uid message is a new buffer (created, mapped by its owner, granted, mapped by the receiver); repeat_receipt_ns is a second cbuf2buf of the same id")
	return nil
}
