// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Test peer (not part of the data plane): a program that passes every frame.
 *
 * A frame that XDP redirects (or XDP_TXes) into a veth is only delivered when
 * the veth's peer has an XDP program attached (docs/platform.md). The
 * namespace tests (test/netns.test.ts) attach this one to the gNB's and the
 * core's veths, so that they receive what the translator forwards.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
