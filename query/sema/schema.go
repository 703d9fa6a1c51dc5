// Package sema holds the stable schema of `cistern query` and checks a
// parsed query against it: names, types and aggregate rules, each error
// positioned at the offending text. Nothing that fails here reaches the
// verifier.
package sema

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
)

// Type is a value type.
type Type int

const (
	TInt Type = iota
	TStr
	TFloat
	THist
)

func (t Type) String() string {
	return [...]string{"integer", "string", "number", "histogram"}[t]
}

// Render says how a column's slots become a value.
type Render int

const (
	RInt  Render = iota // signed 64-bit
	RUint               // unsigned
	RStr                // NUL-terminated bytes over Width slots
	REnum               // integer shown as a name
	RAddr               // IP address: v4 at Slot, v6 at Slot2..Slot2+1, family in slot 6
)

// Column is one column of a table.
type Column struct {
	Name  string
	Type  Type
	Slot  int
	Width int // slots a string spans
	Slot2 int
	R     Render
	Enum  map[uint64]string
	Enter bool // entry/exit tables: known at entry
	Doc   string
}

// Table is one source of events.
type Table struct {
	Name   string
	Object string // kern template
	Joined bool
	Exit   []int // entry/exit tables: slots the exit half provides
	Doc    string
	Cols   []*Column
	byName map[string]*Column
}

// Width is how many slots a whole record of t carries: its columns, and
// for entry/exit tables the join key in slot 16.
func (t *Table) Width() int {
	w := 17
	if !t.Joined {
		w = 0
		for _, c := range t.Cols {
			end := c.Slot + 1
			if c.Width > 1 {
				end = c.Slot + c.Width
			}
			if c.R == RAddr && c.Slot2+2 > end {
				end = c.Slot2 + 2
			}
			if end > w {
				w = end
			}
		}
	}
	return w
}

// Col looks a column up by name.
func (t *Table) Col(name string) *Column { return t.byName[name] }

func common(time string, joined bool) []*Column {
	return []*Column{
		{Name: time, Type: TInt, Slot: 0, R: RUint, Enter: true, Doc: "CLOCK_MONOTONIC ns"},
		{Name: "pid", Type: TInt, Slot: 1, R: RInt, Enter: true, Doc: "process id (tgid)"},
		{Name: "tid", Type: TInt, Slot: 2, R: RInt, Enter: true, Doc: "thread id"},
		{Name: "cgroup_id", Type: TInt, Slot: 3, R: RUint, Enter: true, Doc: "cgroup v2 id"},
		{Name: "comm", Type: TStr, Slot: 4, Width: 2, R: RStr, Enter: true, Doc: "task name"},
	}
}

func ints(from int, enter bool, names ...string) []*Column {
	var out []*Column
	for i, n := range names {
		out = append(out, &Column{Name: n, Type: TInt, Slot: from + i, R: RUint, Enter: enter})
	}
	return out
}

var tcpStates = map[uint64]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV"}

var blockOps = map[uint64]string{'R': "read", 'W': "write", 'D': "discard", 'F': "flush", 'N': "none"}

func joinedTail(enterName, exitName string) []*Column {
	return []*Column{
		{Name: "ret", Type: TInt, Slot: 13, R: RInt, Doc: "return value"},
		{Name: exitName, Type: TInt, Slot: 14, R: RUint, Doc: "CLOCK_MONOTONIC ns at exit"},
		{Name: "latency_ns", Type: TInt, Slot: 15, R: RUint, Doc: exitName + " - " + enterName},
	}
}

func args() []*Column {
	c := ints(7, true, "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")
	return c
}

// Tables is the schema, by name.
var Tables = func() map[string]*Table {
	ts := []*Table{
		{Name: "syscalls", Object: "syscalls", Joined: true, Exit: []int{13, 14}, Doc: "every system call, entry and exit joined per thread (raw_syscalls)",
			Cols: append(append(append(common("enter_ns", true),
				&Column{Name: "syscall", Type: TStr, Slot: 6, R: REnum, Enum: SyscallNames, Enter: true, Doc: "name (x86_64 table)"},
				&Column{Name: "nr", Type: TInt, Slot: 6, R: RInt, Enter: true, Doc: "syscall number"}),
				args()...), joinedTail("enter_ns", "exit_ns")...)},
		{Name: "uprobe", Object: "uprobe", Joined: true, Exit: []int{13, 14}, Doc: "uprobe('<binary or library>', '<symbol>'): calls joined with their returns per thread",
			Cols: append(append(common("enter_ns", true), args()...), joinedTail("enter_ns", "exit_ns")...)},
		{Name: "sched_switch", Object: "sched_switch", Doc: "context switches (sched/sched_switch); pid/comm are the task switched out",
			Cols: append(append(common("time_ns", false), ints(6, false, "prev_pid", "next_pid", "prev_prio", "next_prio", "prev_state")...),
				&Column{Name: "prev_comm", Type: TStr, Slot: 11, Width: 2, R: RStr},
				&Column{Name: "next_comm", Type: TStr, Slot: 13, Width: 2, R: RStr})},
		{Name: "process_exec", Object: "process_exec", Doc: "successful execs (sched/sched_process_exec)",
			Cols: append(append(common("time_ns", false), ints(6, false, "old_pid")...),
				&Column{Name: "filename", Type: TStr, Slot: 7, Width: 8, R: RStr, Doc: "first 63 bytes"})},
		{Name: "process_exit", Object: "process_exit", Doc: "task exits (sched/sched_process_exit)",
			Cols: append(common("time_ns", false), ints(6, false, "prio", "group_dead", "exit_code")...)},
		{Name: "page_cache", Object: "page_cache", Doc: "page-cache insertions and removals (filemap tracepoints)",
			Cols: append(append(common("time_ns", false),
				&Column{Name: "event", Type: TStr, Slot: 6, R: REnum, Enum: map[uint64]string{0: "add", 1: "delete"}}),
				ints(7, false, "dev", "inode", "index", "pages", "pfn")...)},
		{Name: "block_io", Object: "block_io", Joined: true, Exit: []int{10, 14}, Doc: "block requests, issue joined with completion on (dev, sector); pid/comm issued it",
			Cols: append(append(common("issue_ns", true), ints(6, true, "dev", "sector", "bytes")...),
				&Column{Name: "op", Type: TStr, Slot: 9, R: REnum, Enum: blockOps, Enter: true, Doc: "read, write, discard, flush, none"},
				&Column{Name: "error", Type: TInt, Slot: 10, R: RInt},
				&Column{Name: "complete_ns", Type: TInt, Slot: 14, R: RUint},
				&Column{Name: "latency_ns", Type: TInt, Slot: 15, R: RUint, Doc: "complete_ns - issue_ns"})},
		{Name: "tcp_state", Object: "tcp_state", Doc: "TCP state changes (sock/inet_sock_set_state)",
			Cols: append(append(common("time_ns", false), ints(6, false, "family", "sport", "dport")...),
				&Column{Name: "saddr", Type: TStr, Slot: 9, Slot2: 13, R: RAddr},
				&Column{Name: "daddr", Type: TStr, Slot: 10, Slot2: 15, R: RAddr},
				&Column{Name: "old_state", Type: TStr, Slot: 11, R: REnum, Enum: tcpStates},
				&Column{Name: "new_state", Type: TStr, Slot: 12, R: REnum, Enum: tcpStates},
				&Column{Name: "protocol", Type: TInt, Slot: 17, R: RUint})},
	}
	m := map[string]*Table{}
	for _, t := range ts {
		t.byName = map[string]*Column{}
		for _, c := range t.Cols {
			t.byName[c.Name] = c
		}
		m[t.Name] = t
	}
	return m
}()

// TableNames lists the tables in a stable order.
func TableNames() []string {
	var n []string
	for k := range Tables {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// WriteSchema prints every table and column.
func WriteSchema(w io.Writer) {
	for _, n := range TableNames() {
		t := Tables[n]
		name := t.Name
		if name == "uprobe" {
			name = "uprobe('<binary>', '<symbol>')"
		}
		fmt.Fprintf(w, "%s  -- %s\n", name, t.Doc)
		for _, c := range t.Cols {
			doc := c.Doc
			if c.R == REnum && c.Name != "syscall" {
				var vs []string
				for _, v := range c.Enum {
					vs = append(vs, v)
				}
				sort.Strings(vs)
				doc = strings.TrimSpace(doc + " one of " + strings.Join(vs, ","))
			}
			fmt.Fprintf(w, "  %-12s %-8s %s\n", c.Name, c.Type, doc)
		}
	}
}

// StrOf renders a string column from a record's slots.
func (c *Column) StrOf(r []uint64) string {
	switch c.R {
	case REnum:
		v := r[c.Slot]
		if s, ok := c.Enum[v]; ok {
			return s
		}
		return fmt.Sprintf("%d", int64(v))
	case RAddr:
		if r[6] == 10 { // AF_INET6
			var b [16]byte
			binary.LittleEndian.PutUint64(b[:8], r[c.Slot2])
			binary.LittleEndian.PutUint64(b[8:], r[c.Slot2+1])
			return netip.AddrFrom16(b).String()
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(r[c.Slot]))
		return netip.AddrFrom4(b).String()
	}
	b := make([]byte, 0, 8*c.Width)
	for i := 0; i < c.Width; i++ {
		b = binary.LittleEndian.AppendUint64(b, r[c.Slot+i])
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// StrSlots packs s like the kernel packs a string column (for pushdown of
// equality and prefix tests): per slot the value and the mask that matters.
func (c *Column) StrSlots(s string, prefix bool) (vals, masks []uint64, ok bool) {
	if c.R != RStr || len(s) > 8*c.Width-1 {
		return nil, nil, false
	}
	b := make([]byte, 8*c.Width)
	copy(b, s)
	n := len(s)
	if !prefix {
		n++ // the NUL ends the string
	}
	for i := 0; i < c.Width; i++ {
		var m uint64
		for j := 0; j < 8; j++ {
			if i*8+j < n {
				m |= 0xff << (8 * j)
			}
		}
		if m == 0 {
			break
		}
		vals = append(vals, binary.LittleEndian.Uint64(b[i*8:]))
		masks = append(masks, m)
	}
	return vals, masks, true
}

// EnumValue maps a name back to its integer.
func (c *Column) EnumValue(s string) (uint64, bool) {
	for k, v := range c.Enum {
		if v == s {
			return k, true
		}
	}
	return 0, false
}
