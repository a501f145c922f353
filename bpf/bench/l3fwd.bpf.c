// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * XDP L3 forwarder: the RFC 2544 benchmark's L3FWD baseline (not part of
 * the data plane). IPv4 and IPv6: bpf_fib_lookup, TTL / hop limit
 * decrement, MACs from the FIB, bpf_redirect; no translation. What the
 * kernel must resolve (no neighbour, local, TTL 1) goes to the kernel.
 * Modelled on the kernel's samples/bpf/xdp_fwd_kern.c.
 *
 * l3fwd_pass is the XDP_PASS program the kernel baselines need on the
 * device under test's veths: a veth delivers an XDP_TX or redirected frame
 * only to a peer with an XDP program. l3fwd_drop on the DUT measures the
 * generator alone.
 */
#include "l3fwd.h"

SEC("xdp")
int l3fwd_xdp(struct xdp_md *ctx)
{
	return l3fwd(ctx);
}

SEC("xdp")
int l3fwd_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* The generator's own cost: a device under test that drops everything. */
SEC("xdp")
int l3fwd_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
