// Package cachebench is `cistern bench cache`: the in-kernel eviction
// policies (packages evict and cache) over bundled traces.
//
// Workload: Workload, the Bundled traces (Twitter cluster 52, ARC OLTP,
// CloudPhysics; found in replay.TraceDir) replayed at cache sizes of 1, 5,
// 10 and 25% of each trace's distinct objects (quick: Twitter and ARC at
// 1 and 10%).
//
// Modes: Policies, one per eviction policy, simplest first.
//
// Targets: none; the hit ratios are checked against libCacheSim in
// package cache's tests.
//
// Plot: the miss-ratio curves, one PNG per trace (PlotCurves).
package cachebench
