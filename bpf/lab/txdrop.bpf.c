// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Test peer (not part of the data plane): a TC egress program that drops
 * every `every`-th IPv4 or EtherType 0x88b5 frame it sees (TC_ACT_SHOT, which
 * the sender's sendmmsg sees as ENOBUFS), by count, not by content: the same
 * frame sent again passes. test/probe-faults.test.ts uses it to make frames
 * fail inside sendmmsg batches, after the kernel gave them their OPT_ID.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

volatile const __u32 every = 10;
__u32 seen;

SEC("tc")
int tc_drop_nth(struct __sk_buff *skb)
{
	/* The EtherType in the frame: a packet socket's skb->protocol is the socket's. */
	__be16 type;
	if (bpf_skb_load_bytes(skb, 12, &type, sizeof type) != 0)
		return TC_ACT_OK;
	if (type != bpf_htons(ETH_P_IP) && type != bpf_htons(0x88b5))
		return TC_ACT_OK;
	__u32 n = __sync_fetch_and_add(&seen, 1) + 1;
	return n % every == 0 ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
