package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// checked builds a value of n bytes whose last 4 bytes are the CRC of the
// rest, and whose body derives from seed: two versions' halves never verify.
func checked(n int, seed uint32) []byte {
	v := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	for i := range v {
		v[i] = 'a' + byte(r.IntN(26))
	}
	if n >= 8 {
		binary.LittleEndian.PutUint32(v[n-4:], crc32.ChecksumIEEE(v[:n-4]))
	}
	return v
}

func verify(v []byte) bool {
	n := len(v)
	if n < 8 {
		return false
	}
	return binary.LittleEndian.Uint32(v[n-4:]) == crc32.ChecksumIEEE(v[:n-4])
}

// TestConcurrentSetGet runs UDP sets and gets of the same keys from several
// threads through the real XDP program: every hit must be an intact value,
// and when it is over no block may be leaked.
func TestConcurrentSetGet(t *testing.T) {
	h := newHarness(t, Config{PoolMB: 1, MaxObjects: 64, WriteWindow: 1})
	keys := []string{"k0", "k1", "k2", "k3"}
	for i, k := range keys {
		h.set(k, 0, checked(200, uint32(i)))
	}
	deadline := time.Now().Add(3 * time.Second)
	var hits, misses, sets, torn atomic.Int64
	var wg sync.WaitGroup
	run := func(prog *ebpf.Program, pkt []byte) (uint32, []byte) {
		opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, 4096)}
		ret, err := prog.Run(&opts)
		if err != nil {
			t.Error(err)
		}
		return ret, opts.DataOut
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(deadline) {
				k := keys[r.IntN(len(keys))]
				v := checked(8+r.IntN(1017), r.Uint32())
				run(h.xdp, mcRequest(1, fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", k, len(v), v)))
				sets.Add(1)
			}
		}(w)
	}
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for time.Now().Before(deadline) {
				k := keys[r.IntN(len(keys))]
				in := mcRequest(2, "get "+k+"\r\n")
				ret, out := run(h.xdp, in)
				if ret != xdpTX {
					misses.Add(1)
					continue
				}
				v, _, err := parseReply(in, out, k)
				if err != nil || !verify(v) {
					torn.Add(1)
					continue
				}
				hits.Add(1)
			}
		}(g)
	}
	wg.Wait()
	c := h.counters()
	t.Logf("sets %d, hits %d, misses %d, torn %d; kernel torn_retries %d, read_failures %d, write_conflicts %d",
		sets.Load(), hits.Load(), misses.Load(), torn.Load(), c["torn_retries"], c["read_failures"], c["write_conflicts"])
	if torn.Load() != 0 {
		t.Fatalf("%d torn or corrupt values served", torn.Load())
	}
	if hits.Load() == 0 || sets.Load() == 0 {
		t.Fatal("the stress did not exercise both sides")
	}
	st, err := h.srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pool.LeakedBlocks != 0 {
		t.Fatalf("leaked %d blocks: %+v", st.Pool.LeakedBlocks, st.Pool)
	}
}

// TestFuzzXDP drives mutated memcached packets through the XDP program. The
// oracle: a packet is either passed on unchanged, or answered with XDP_TX
// carrying exactly the value stored under the key it asked for.
func TestFuzzXDP(t *testing.T) {
	h := newHarness(t, Config{})
	model := map[string][]byte{}
	for i := 0; i < 16; i++ {
		k := fmt.Sprintf("key%02d", i)
		model[k] = value(1+i*67, byte(i))
		h.set(k, i, model[k])
	}
	seeds := [][]byte{
		mcRequest(1, "get key03\r\n"),
		mcRequest(2, "get key15\r\n"),
		mcRequest(3, "get key07 key08\r\n"),
		mcRequest(4, "gets key01\r\n"),
		mcRequest(5, "stats\r\n"),
	}
	r := rand.New(rand.NewPCG(42, 42))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	var tx int
	for i := 0; i < n; i++ {
		pkt := bytes.Clone(seeds[r.IntN(len(seeds))])
		switch r.IntN(4) {
		case 0: // flip bytes anywhere after the Ethernet header
			for j := 0; j < 1+r.IntN(4); j++ {
				pkt[14+r.IntN(len(pkt)-14)] = byte(r.Uint32())
			}
		case 1: // mutate only the memcached text
			pkt[50+r.IntN(len(pkt)-50)] = byte(r.Uint32())
		case 2: // truncate
			pkt = pkt[:14+r.IntN(len(pkt)-14)]
		case 3: // extend with junk
			extra := make([]byte, 1+r.IntN(64))
			for j := range extra {
				extra[j] = byte(r.Uint32())
			}
			pkt = append(pkt, extra...)
		}
		ret, out := h.xdpRun(pkt)
		switch ret {
		case xdpPass:
			if !bytes.Equal(out, pkt) {
				t.Fatalf("packet %d modified on pass:\n in %x\nout %x", i, pkt, out)
			}
		case xdpTX:
			tx++
			text := string(pkt[50:])
			var key string
			fmt.Sscanf(text, "get %s", &key)
			want, ok := model[key]
			v, _, err := parseReply(pkt, out, key)
			if !ok || err != nil || !bytes.Equal(v, want) {
				t.Fatalf("packet %d (%q) answered wrongly: key %q known %v err %v", i, text, key, ok, err)
			}
		default:
			t.Fatalf("packet %d: verdict %d", i, ret)
		}
	}
	c := h.counters()
	t.Logf("%d mutated packets: %d answered in the kernel; pass_malformed %d, pass_syntax %d, pass_long %d, unsupported %d, multiget %d, multipacket %d",
		n, tx, c["pass_malformed"], c["pass_syntax"], c["pass_long"], c["unsupported"], c["multiget"], c["multipacket"])
	if tx == 0 {
		t.Fatal("no mutated packet was still a valid get: the fuzzer is not reaching the hit path")
	}
}
