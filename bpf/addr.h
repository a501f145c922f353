/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* IPv6 addresses as two host-order 64-bit halves, and the bit-field moves of
 * RFC 9433: placing or reading a value at any bit offset, not only on byte
 * boundaries. Shifts by 64 are undefined, hence the (x << 1) << (63 - n)
 * form, which yields 0 for n == 0. */
#ifndef MUP_ADDR_H
#define MUP_ADDR_H

#include <linux/types.h>
#include <bpf/bpf_endian.h>

struct u128 {
	__u64 hi;
	__u64 lo;
};

/* Plain 64-bit accesses: packet data (the verifier allows unaligned packet
 * access on this architecture) and 8-byte aligned map values. A memcpy here
 * would let clang assume nothing about alignment and split every address
 * into 16 byte-sized stores, which measured as the hottest spot of the
 * translation. */
static __always_inline struct u128 u128_load(const void *p)
{
	const __u64 *w = p;
	struct u128 v = { bpf_be64_to_cpu(w[0]), bpf_be64_to_cpu(w[1]) };

	return v;
}

static __always_inline void u128_store(void *p, struct u128 v)
{
	__u64 *w = p;

	w[0] = bpf_cpu_to_be64(v.hi);
	w[1] = bpf_cpu_to_be64(v.lo);
}

/* For 4-byte aligned memory such as lookup keys on the stack, where the
 * verifier insists on aligned accesses. */
static __always_inline void u128_store32(void *p, struct u128 v)
{
	__u32 *w = p;

	w[0] = bpf_htonl(v.hi >> 32);
	w[1] = bpf_htonl((__u32)v.hi);
	w[2] = bpf_htonl(v.lo >> 32);
	w[3] = bpf_htonl((__u32)v.lo);
}

/* v >> n for n in 0..127 */
static __always_inline struct u128 u128_shr(struct u128 v, __u32 n)
{
	struct u128 r;

	if (n >= 64) {
		r.hi = 0;
		r.lo = v.hi >> (n - 64);
	} else {
		r.hi = v.hi >> n;
		r.lo = (v.lo >> n) | ((v.hi << 1) << (63 - n));
	}
	return r;
}

/* v << n for n in 0..127 */
static __always_inline struct u128 u128_shl(struct u128 v, __u32 n)
{
	struct u128 r;

	if (n >= 64) {
		r.lo = 0;
		r.hi = v.lo << (n - 64);
	} else {
		r.lo = v.lo << n;
		r.hi = (v.hi << n) | ((v.lo >> 1) >> (63 - n));
	}
	return r;
}

/* Keep the top n bits, n in 0..128. */
static __always_inline struct u128 u128_mask(struct u128 v, __u32 n)
{
	if (n >= 128)
		return v;
	if (n >= 64) {
		v.lo &= ~(~0ULL >> (n - 64));
		return v;
	}
	v.hi &= ~(~0ULL >> n);
	v.lo = 0;
	return v;
}

#endif
