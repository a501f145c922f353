/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Per-CPU counting. Every packet ends in exactly one event slot; translated
 * packets also count in their rule's slot, each CPU in its own copy of the
 * slot (maps.h). Array lookups and bpf_get_smp_processor_id() are inlined by
 * the verifier on this kernel, so a count costs no helper call. */
#ifndef MUP_COUNTERS_H
#define MUP_COUNTERS_H

#include "maps.h"

/* Keep enum mup_event, enum mup_limits and enum mup_function in the object's
 * BTF, where user space reads the event names and checks the limits and the
 * retired slots' order: clang emits a type only when something uses it by
 * name. */
const volatile enum mup_event mup_event_names __attribute__((used)) = MUP_EV_MAX;
const volatile enum mup_limits mup_limits_btf __attribute__((used)) = MUP_MAX_SEGS;
const volatile enum mup_function mup_function_btf __attribute__((used)) = MUP_FN_COUNT;

static __always_inline void mup_count(__u32 slot, __u32 bytes)
{
	__u32 key;
	struct mup_counter *c;

	/* Past the last slot would be the next CPU's copy of a low one. */
	if (slot >= mup_counter_slots)
		return;
	key = bpf_get_smp_processor_id() * mup_counter_slots + slot;
	c = bpf_map_lookup_elem(&mup_counters, &key);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Count the event and return the verdict, so paths read `return ev(...)`. */
static __always_inline int ev(__u32 event, __u32 bytes, int verdict)
{
	mup_count(event, bytes);
	return verdict;
}

static __always_inline void count_rule(__u32 rule, __u32 bytes)
{
	mup_count(MUP_EVENT_SLOTS + rule, bytes);
}

#endif
