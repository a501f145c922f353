/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * How long a CPU of this machine stops running a task that never yields:
 * one thread pinned to CPU N at SCHED_FIFO priority 50 reads CLOCK_MONOTONIC
 * in a loop for S seconds and counts the gaps between two reads. Nothing on
 * the CPU but interrupts, softirqs and higher real-time threads can take it
 * from such a thread, so a long gap is the CPU itself going away (the
 * hypervisor running something else on it), whether or not the guest
 * accounts it as steal time. The RFC 2544 bench's DUT runs on that CPU
 * (docs/bench.md "vCPU stalls and the zero-loss rate").
 *
 * Usage: vcpu-stalls CPU SECONDS   (root: SCHED_FIFO; scripts/vcpu-stalls.sh
 * lifts the kernel's real-time throttle for the run, which would otherwise
 * take the CPU away for 50 ms every second, and puts it back).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	static const uint64_t limit_ns[] = { 10000, 100000, 250000, 500000, 770000, 1000000, 2000000, 5000000 };
	static const char *label[] = { ">10us", ">100us", ">250us", ">500us", ">0.77ms", ">1ms", ">2ms", ">5ms" };
	enum { N = sizeof(limit_ns) / sizeof(limit_ns[0]) };
	uint64_t count[N] = { 0 }, max_gap = 0, in_gaps = 0;
	struct sched_param prio = { .sched_priority = 50 };
	cpu_set_t set;

	if (argc != 3) {
		fprintf(stderr, "usage: %s CPU SECONDS\n", argv[0]);
		return 2;
	}
	int cpu = atoi(argv[1]);
	double secs = atof(argv[2]);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	if (sched_setscheduler(0, SCHED_FIFO, &prio) != 0) {
		perror("sched_setscheduler SCHED_FIFO (run as root)");
		return 1;
	}
	uint64_t start = now_ns(), last = start, end = start + (uint64_t)(secs * 1e9);
	while (last < end) {
		uint64_t t = now_ns(), gap = t - last;

		last = t;
		if (gap > max_gap)
			max_gap = gap;
		if (gap > limit_ns[0])
			in_gaps += gap;
		for (int i = 0; i < N && gap > limit_ns[i]; i++)
			count[i]++;
	}
	printf("cpu %d, %.0f s at SCHED_FIFO 50: longest gap %.3f ms; gaps", cpu, secs, max_gap / 1e6);
	for (int i = 0; i < N; i++)
		printf(" %s %llu", label[i], (unsigned long long)count[i]);
	printf("; %.2f %% of the time in gaps over 10 us\n", 100.0 * in_gaps / (double)(end - start));
	return 0;
}
