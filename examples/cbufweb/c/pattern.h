/* The bodies every server of the cbufweb comparison produces: word i of a
 * body (little-endian uint64) is (seed+1)*K1 + i*K2, cut to the requested
 * size. The checksum is the sum of the body's words, the last partial word
 * zero-padded, so a client checks a body in one pass. cbufweb's content
 * component and the FastCGI baseline application both use web_fill. */
#ifndef CBUFWEB_PATTERN_H
#define CBUFWEB_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WEB_K1 0x9E3779B97F4A7C15ull
#define WEB_K2 0xD1B54A32D192ED03ull

/* Fills dst with bytes [off, off+len) of body `seed` (off a multiple of 8)
 * and returns the sum of those words. */
static inline uint64_t web_fill(void *dst, size_t off, size_t len, uint64_t seed)
{
	uint64_t base = (seed + 1) * WEB_K1, i = off / 8, sum = 0;
	uint64_t *w = dst;
	size_t n = len / 8;
	uint64_t v = base + i * WEB_K2;
	for (size_t k = 0; k < n; k++) {
		w[k] = v;
		sum += v;
		v += WEB_K2;
	}
	size_t tail = len - n * 8;
	if (tail) {
		uint64_t last = v, masked = 0;
		memcpy(&masked, &last, tail); /* little-endian: the first tail bytes */
		memcpy((char *)dst + n * 8, &last, tail);
		sum += masked;
	}
	return sum;
}

/* Parses "size=N&seed=S..." style query strings: value of key, or -1. */
static inline long long web_query_num(const char *q, size_t qlen, const char *key)
{
	size_t kl = strlen(key);
	const char *end = q + qlen;
	for (const char *p = q; p && p < end;) {
		if ((size_t)(end - p) > kl && !memcmp(p, key, kl) && p[kl] == '=') {
			long long v = 0;
			const char *d = p + kl + 1;
			if (d >= end || *d < '0' || *d > '9')
				return -1;
			for (; d < end && *d >= '0' && *d <= '9'; d++) {
				v = v * 10 + (*d - '0');
				if (v > (1ll << 40))
					return -1;
			}
			if (d < end && *d != '&')
				return -1;
			return v;
		}
		p = memchr(p, '&', (size_t)(end - p));
		if (p)
			p++;
	}
	return -1;
}

#endif
