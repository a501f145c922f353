/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Longest-prefix match as one exact-match hash lookup per configured prefix
 * length, longest first. The kernel's LPM trie costs 31 ns at one entry and
 * 100 ns at 65,536 here; a hash lookup does not grow with the table, and a
 * table rarely has more than a few distinct lengths. */
#ifndef MUP_LOOKUP_H
#define MUP_LOOKUP_H

#include "maps.h"
#include "addr.h"

/* The 64-bit key (IPv4 DA || TEID, host order) masked to plen bits. */
static __always_inline __u64 policy_mask(__u64 k, __u32 plen)
{
	if (plen >= 64)
		return k;
	return plen ? k & ~(~0ULL >> plen) : 0;
}

static __always_inline struct mup_policy *policy_get(__u64 masked, __u32 plen)
{
	struct mup_policy_key key = {};

	key.plen = plen;
	key.daddr = bpf_htonl((__u32)(masked >> 32));
	key.teid = bpf_htonl((__u32)masked);
	return bpf_map_lookup_elem(&mup_policies, &key);
}

/* A G-PDU's policy: the longest prefix of DA || TEID (k) that has one.
 * An address-only entry (MUP_POL_ADDR_ONLY) is no rule: it is skipped,
 * and *addr_seen says one was there (the address is ours, its TEID
 * covered by no policy). */
static __always_inline struct mup_policy *policy_lookup(const struct mup_config *cfg, __u64 k, int *addr_seen)
{
	__u32 n = cfg->n_policy_plens;

	for (int i = 0; i < MUP_MAX_PLENS; i++) {
		__u32 plen;
		struct mup_policy *p;

		if (i >= n)
			break;
		plen = cfg->policy_plens[i];
		p = policy_get(policy_mask(k, plen), plen);
		if (!p)
			continue;
		if (p->flags & MUP_POL_ADDR_ONLY) {
			*addr_seen = 1;
			continue;
		}
		return p;
	}
	return 0;
}

/* Is the IPv4 address one of ours: does a policy's DA prefix cover it
 * (messages other than G-PDU, malformed packets and fragments, which are
 * matched by the address alone)? Prefixes with a TEID part are represented
 * by their address's /32 entry (a policy, or the address-only one). */
static __always_inline int policy_addr(const struct mup_config *cfg, __be32 daddr)
{
	__u32 n = cfg->n_policy_plens;
	__u64 k = (__u64)bpf_ntohl(daddr) << 32;

	for (int i = 0; i < MUP_MAX_PLENS; i++) {
		__u32 plen;

		if (i >= n)
			break;
		plen = cfg->policy_plens[i];
		if (plen > 32)
			continue;
		if (policy_get(policy_mask(k, plen), plen))
			return 1;
	}
	return 0;
}

/* bench:micro's worst case, built with -DMUP_MEMO_MISS: every packet misses
 * its CPU's copy (the lookup and the copy, every time). */
#ifdef MUP_MEMO_MISS
#define MEMO_HIT(cond) 0
#else
#define MEMO_HIT(cond) (cond)
#endif

/* policy_lookup through this CPU's copy (mup_policy_memo in maps.h says
 * when a copy is good). Always returns the copy (one
 * pointer type after it, so the verifier walks the caller once). */
static __always_inline struct mup_policy *policy_lookup_memo(const struct mup_config *cfg, __u64 k, int *addr_seen)
{
	__u32 z = 0;
	struct mup_policy_memo *m = bpf_map_lookup_elem(&mup_policy_memo, &z);
	struct mup_policy *p;
	__u32 gen = cfg->policy_gen;
	__u32 plen = cfg->n_policy_plens ? cfg->policy_plens[0] : 0;
	__u64 key = policy_mask(k, plen);

	if (!m)
		return 0;
	if (MEMO_HIT(m->valid && m->key == key && m->gen == gen && m->plen == plen))
		return &m->pol;
	p = policy_lookup(cfg, k, addr_seen);
	if (!p)
		return 0;
	__builtin_memcpy(&m->pol, p, sizeof(*p));
	m->key = key;
	m->gen = gen;
	m->plen = plen;
	m->valid = 1;
	return &m->pol;
}

static __always_inline struct mup_localsid *localsid_lookup(const struct mup_config *cfg, struct u128 da)
{
	struct mup_localsid_key key = {};
	__u32 n = cfg->n_localsid_plens;

	for (int i = 0; i < MUP_MAX_PLENS; i++) {
		__u32 plen;
		struct mup_localsid *s;

		if (i >= n)
			break;
		plen = cfg->localsid_plens[i];
		key.plen = plen;
		u128_store32(key.addr, u128_mask(da, plen));
		s = bpf_map_lookup_elem(&mup_localsids, &key);
		if (s)
			return s;
	}
	return 0;
}

/* localsid_lookup through this CPU's copy (mup_lsid_memo in maps.h). */
static __always_inline struct mup_localsid *localsid_lookup_memo(const struct mup_config *cfg, struct u128 da)
{
	__u32 k = 0;
	struct mup_localsid_memo *m = bpf_map_lookup_elem(&mup_lsid_memo, &k);
	struct mup_localsid *s;
	__u32 gen = cfg->localsid_gen;
	__u32 plen = cfg->n_localsid_plens ? cfg->localsid_plens[0] : 0;
	struct u128 key = u128_mask(da, plen);

	if (!m)
		return 0;
	if (MEMO_HIT(m->valid && m->gen == gen && m->plen == plen && m->key.hi == key.hi && m->key.lo == key.lo))
		return &m->ls;
	s = localsid_lookup(cfg, da);
	if (!s)
		return 0;
	__builtin_memcpy(&m->ls, s, sizeof(*s));
	m->key = key;
	m->gen = gen;
	m->plen = plen;
	m->valid = 1;
	return &m->ls;
}

#endif
