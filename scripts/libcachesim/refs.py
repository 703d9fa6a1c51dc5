"""libCacheSim's miss ratios on the key files scripts/libcachesim writes.

Usage: python refs.py KEYDIR > evict/replay/testdata/libcachesim.json
(scripts/libcachesim-refs.sh runs it with PyPI's libcachesim 0.3.5).
Every object has size 1 (--unit objects); the traces and cache sizes are
evict/replay's LibCacheSimTraces, listed in KEYDIR/traces.json.
"""
import json
import os
import sys

import libcachesim as lcs

POLICIES = {
    "fifo": lcs.FIFO,
    "lru": lcs.LRU,
    "clock": lcs.Clock,
    "sieve": lcs.Sieve,
    "s3fifo": lcs.S3FIFO,
    "lfu": lcs.LFU,
    "lhd": lcs.LHD,
    "wtinylfu": lcs.WTinyLFU,
}


def main():
    keydir = sys.argv[1]
    with open(os.path.join(keydir, "traces.json")) as f:
        traces = json.load(f)
    out = {"libcachesim": lcs.__version__, "unit": "objects", "miss_ratio": {}}
    for t in traces:
        p = lcs.ReaderInitParam(binary_fmt_str="<Q", ignore_obj_size=True)
        p.obj_id_field = 1
        reader = lcs.TraceReader(os.path.join(keydir, t["name"] + ".keys"),
                                 trace_type=lcs.TraceType.BIN_TRACE, reader_init_params=p)
        per = out["miss_ratio"][t["name"]] = {}
        for size in t["sizes"]:
            row = per[str(size)] = {}
            for name, cls in POLICIES.items():
                reader.reset()
                miss, _ = cls(size).process_trace(reader)
                row[name] = round(miss, 6)
                print(t["name"], size, name, row[name], file=sys.stderr)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
