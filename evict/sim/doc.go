// Package sim holds the user-space cache simulators that page-cache
// figures are read against: Belady's OPT (the limit no policy can pass)
// and a model of the kernel's default page cache (the active and inactive
// file lists with refault detection). Both run over a sequence of keys,
// one per page access, and count misses: pages a cache of that size would
// have loaded. The policies themselves are replayed in the kernel (package
// cache), so that a simulated figure is the very code the agent runs.
package sim
