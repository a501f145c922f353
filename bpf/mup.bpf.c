// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * srv6-mup data plane: one XDP program, the RFC 9433 translations.
 *
 *   IPv4 UDP/2152 to a policy prefix    -> H.M.GTP4.D    (gtp4d.h)
 *   IPv6 to a local SID (local.h), by the SID's behaviour:
 *                                       -> End.M.GTP4.E  (gtp4e.h)
 *                                       -> End.M.GTP6.E  (gtp6e.h)
 *                                       -> End.M.GTP6.D, End.M.GTP6.D.Di (gtp6d.h)
 *   other IPv4/IPv6 to a session's UE   -> H.M.Session.Encaps (session.h)
 *   anything else                       -> XDP_PASS, counted by reason
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "counters.h"
#include "maps.h"
#include "gtp4d.h"
#include "local.h"
#include "session.h"
#include "probe.h"

/* Which build this is; `make` leaves it 0. Kept in the object (.rodata) so
 * that two builds of the same source differ: the daemon's upgrade test
 * swaps one for the other under traffic. */
#ifndef MUP_BUILD_ID
#define MUP_BUILD_ID 0
#endif
const volatile __u32 mup_build_id = MUP_BUILD_ID;

static __always_inline int mup_dispatch(struct xdp_md *ctx, const struct mup_config *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 bytes = end - data;

	if ((void *)(eth + 1) > end)
		return ev(MUP_EV_PASS_NOT_IP, bytes, XDP_PASS);
	/* Sessions (session.h) only when there are any: a packet to a UE
	 * address that no local SID or policy claims first (docs/design.md). */
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (cfg->n_session4_plens) {
			int rc = session4(ctx, cfg, bytes);

			if (rc != SESSION_NOT_MINE)
				return rc;
		}
		return gtp4d(ctx, cfg, bytes);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if (cfg->n_session6_plens) {
			int rc = session6(ctx, cfg, bytes);

			if (rc != SESSION_NOT_MINE)
				return rc;
		}
		return srv6_local(ctx, cfg, bytes);
	}
	return ev(MUP_EV_PASS_NOT_IP, bytes, XDP_PASS);
}

SEC("xdp")
int mup_xdp(struct xdp_md *ctx)
{
	const struct mup_config *cfg = cfg_current();
	int verdict;

	/* The latency probe (probe.h): off, it costs a load and a branch
	 * here and again below, both always taken the same way. Built with
	 * -DMUP_NO_PROBE (bench:micro's reference) it is not there at all. */
#ifndef MUP_NO_PROBE
	if (probe_on(cfg))
		probe_enter(ctx);
#endif
	verdict = mup_dispatch(ctx, cfg);
#ifndef MUP_NO_PROBE
	if (probe_on(cfg))
		return probe_exit(ctx, cfg, verdict);
#endif
	return verdict;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
