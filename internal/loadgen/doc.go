// Package loadgen is Cistern's memcached UDP load generator. It drives
// `cistern bench kv`, which compares memcached alone with Kerby-KV, an XDP
// cache that answers memcached UDP GETs inside the kernel, so it must both
// push a server as hard as two cores allow and prove that every value the
// server (or the kernel) returned was right.
//
// # Workload
//
// The workload is the Kerby paper's: Keys keys of exactly KeyLen (8) bytes
// (the key number in fixed-width hex, see Key), values of 128 B for 75% of
// the keys and 1024 B for the rest (DefaultValueSize, fixed per key),
// zipfian key popularity (the YCSB generator, see Zipfian), optionally
// scrambled so that the hot keys are spread over the key space. A Client
// first sets every key once (Preload), then runs GET-only or mixed GET/SET
// phases for a duration or an op count (Run, RunPhase).
//
// # Verifiable values
//
// A value is a 16-byte header holding the key number and a version (both
// as hex), followed by filler bytes derived from (key, version); see
// AppendValue and CheckValue. Every GET hit is checked in full: a wrong
// length or flags word (see KeyFlags), another key's value, corrupted
// filler, a value torn between two versions or a version never written
// counts in Result.WrongValues. The client tracks per key the
// highest version whose SET was acknowledged; a GET that returns an older
// version than the one acknowledged before the GET was sent counts in
// Result.StaleValues. To make "older" meaningful, at most one SET per key is
// in flight at any time across all workers (a SET drawn for a key that
// already has one in flight becomes a GET), so versions are written in the
// order they are numbered. A SET whose reply was lost may still have been
// applied; reading its version back later is not counted as stale.
//
// # Engine
//
// New opens one connected UDP socket per worker in the calling thread's
// network namespace (so callers can create the client inside
// netenv.Do), after which Preload and Run may be called from any goroutine.
// Each worker runs a closed loop with a window: it keeps up to Depth
// requests outstanding, sends them in batches with sendmmsg and reads
// replies in batches with recvmmsg (golang.org/x/net/ipv4 WriteBatch and
// ReadBatch), matches replies to requests by the 16-bit memcached UDP
// request id, and retires requests older than Timeout as lost. A reply that
// arrives for a retired request counts as Late; the ids of lost requests are
// quarantined for a while so that such a reply cannot be mistaken for the
// reply to a newer request.
//
// Workers share nothing on the hot path except the per-key version words
// (atomics, touched by SETs and read by GETs); counters and the latency
// histogram are per worker and merged when a phase ends. Request buffers,
// batch descriptors and receive buffers are allocated once per worker; the
// one allocation left per datagram is the source address that x/net's
// ReadBatch builds for every message it receives.
package loadgen
