/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* IPv6 in: a packet to a local SID goes to the function of that SID
 * (RFC 9433 §6.3-6.6). The checks every function shares come first, in the
 * order docs/datapath.md gives; then one branch on the behaviour. */
#ifndef MUP_LOCAL_H
#define MUP_LOCAL_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include "mup_shared.h"
#include "counters.h"
#include "lookup.h"
#include "gtp4e.h"
#include "gtp6e.h"
#include "gtp6d.h"

static __always_inline int srv6_local(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct mup_localsid *ls;
	struct u128 da;
	__u32 payload_len;

	if ((void *)(ip6 + 1) > end)
		return ev(MUP_EV_PASS_MALFORMED, bytes, XDP_PASS); /* no DA to judge by */
	da = u128_load(&ip6->daddr);
	ls = localsid_lookup_memo(cfg, da);
	if (!ls)
		return ev(MUP_EV_PASS_NO_LOCALSID, bytes, XDP_PASS);

	if (ip6->version != 6)
		return ev(MUP_EV_DROP_V6_BAD_HEADER, bytes, XDP_DROP);
	payload_len = bpf_ntohs(ip6->payload_len);
	if (sizeof(struct ethhdr) + sizeof(*ip6) + payload_len > bytes)
		return ev(MUP_EV_DROP_V6_BAD_LENGTH, bytes, XDP_DROP);

	/* End.M.GTP4.E first: the one branch the IPv4 downlink pays. */
	if (ls->behavior == MUP_BEH_GTP4E)
		return gtp4e(ctx, cfg, bytes, data, end, ip6, da, ls, payload_len);
	switch (ls->behavior) {
	case MUP_BEH_GTP6E:
		return gtp6e(ctx, cfg, bytes, ip6, ls, payload_len);
	case MUP_BEH_GTP6D:
	case MUP_BEH_GTP6D_DI:
		return gtp6d(ctx, cfg, bytes, ip6, ls, payload_len);
	}
	return ev(MUP_EV_DROP_BAD_RULE, bytes, XDP_DROP);
}

#endif
