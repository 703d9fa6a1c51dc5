package capture

import (
	"math/rand/v2"
	"testing"

	"github.com/cistern-ebpf/cistern/accum"
)

// TestParsersSurviveGarbage feeds both parsers random bytes, random
// fragment sizes and both directions, mixed with valid-looking headers and
// gaps: they must never panic, and must count what they skip.
func TestParsersSurviveGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for _, proto := range []string{"postgres", "mysql"} {
		var bad uint64
		for conn := range 200 {
			p := newParser(proto, uint64(conn))
			var out []Query
			for range 50 {
				b := make([]byte, rng.IntN(300))
				for i := range b {
					b[i] = byte(rng.UintN(256))
				}
				if len(b) > 5 && rng.IntN(3) == 0 { // a plausible header, absurd body
					b[0], b[3], b[4] = byte(rng.IntN(8)), 0, comQuery
				}
				if rng.IntN(20) == 0 {
					p.lost()
				}
				out = p.feed(out[:0], accum.Direction(rng.IntN(2)), b, fragTimes{opens: true, closes: true}, 1)
			}
			p.close(nil)
			bad += p.bad()
		}
		if bad == 0 {
			t.Errorf("%s: random bytes, yet nothing counted as unparseable", proto)
		}
		t.Logf("%s: %d bytes skipped", proto, bad)
	}
}
