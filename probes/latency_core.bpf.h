/* The core of the latency object (uprobe_latency.bpf.c), which every part
 * of it includes: the configuration, the maps they share, each thread's
 * stack of open probed calls, and the recording of a call's latency. The
 * parts (latency_statements.bpf.h, latency_stages.bpf.h,
 * latency_cpu_waits.bpf.h) call into this header, never into the file
 * that includes them. */
#ifndef MYSQLPROBE_LATENCY_CORE_BPF_H
#define MYSQLPROBE_LATENCY_CORE_BPF_H

#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "uprobe_latency.h"

#include "x86_64_regs.h"

/* set before loading (see struct latency_config); the ABI version is
 * compiled in, and user space checks it against its own before loading */
const volatile struct latency_config config = { .abi = UPROBE_LATENCY_ABI };
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum latency_limits limits;
	enum histogram_layout histogram;
	enum probe_cookie cookie;
	enum part_mode part_mode;
	enum stmt_cookie stmt_cookie;
	enum server_command command;
	enum counter_id counter;
} abi_enums = {};

/* Set by user space once every probe is attached, cleared before any is
 * detached: all functions share one window, whatever the attach order.
 * Non-zero, it numbers the window: duty cycles open many, and frames left
 * on a stack by a window (their return came while closed) are dropped in
 * the next, so a return never matches an entry of an earlier window. */
__u32 enabled = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, __u32);
	__type(value, struct probe_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PART_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct part_key);
	__type(value, struct part_stats);
} part_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EDGE_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct edge_key);
	__type(value, struct edge_stats);
} edges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct thread_stack);
} stacks SEC(".maps");

/* never written: all-zero values to insert from, too large for the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_stack);
} empty_stack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct part_stats);
} empty_part SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_COST_CLASSES);
	__type(key, __u32);
	__type(value, struct probe_cost);
} costs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_by(__u32 id, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &id);

	if (c)
		__sync_fetch_and_add(c, n);
}

static __always_inline void count(__u32 id)
{
	count_by(id, 1);
}

enum { SKIP, TARGET, HELPER };

/* the target while the window is open, and the calibration helper always
 * (its hits stay out of the engine counters, which describe the target) */
static __always_inline int wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (config.calib_tgid && tgid == config.calib_tgid)
		return HELPER;
	return enabled && (!config.targ_tgid || tgid == config.targ_tgid) ? TARGET : SKIP;
}

static __always_inline unsigned long arg_value(struct x86_64_regs *regs, __u32 index)
{
	/* load every argument register: the verifier rejects a computed ctx offset */
	unsigned long a0 = regs->di, a1 = regs->si, a2 = regs->dx;
	unsigned long a3 = regs->cx, a4 = regs->r8, a5 = regs->r9;

	if (index == 0)
		return a0;
	if (index == 1)
		return a1;
	if (index == 2)
		return a2;
	if (index == 3)
		return a3;
	if (index == 4)
		return a4;
	return index == 5 ? a5 : 0;
}

static __always_inline struct thread_stack *thread_stack(__u32 tid, bool create, int who)
{
	struct thread_stack *st = bpf_map_lookup_elem(&stacks, &tid);
	__u32 zero = 0, window = enabled;

	if (st && who == TARGET && st->window != window) {
		st->depth = 0;
		st->overflow = 0;
		st->stmt_depth = 0;
		st->window = window;
	}
	if (st || !create)
		return st;
	st = bpf_map_lookup_elem(&empty_stack, &zero);
	if (!st)
		return 0;
	bpf_map_update_elem(&stacks, &tid, st, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&stacks, &tid);
	if (!st)
		count(CNT_NO_STACK);
	else if (who == TARGET)
		st->window = window;
	return st;
}

/* a global function: verified once on its own, which keeps probe_return's
 * verification small */
__noinline int record_edge(__u32 tid, __u32 probe, __u32 parent, __u64 delta, __s64 corrected)
{
	struct edge_key ek = { .tid = tid, .probe = probe, .parent = parent };
	struct edge_stats *es = bpf_map_lookup_elem(&edges, &ek);

	if (!es) {
		struct edge_stats first = {};

		bpf_map_update_elem(&edges, &ek, &first, BPF_NOEXIST);
		es = bpf_map_lookup_elem(&edges, &ek);
	}
	if (es) {
		/* one thread updates its own keys: no atomics needed */
		es->calls++;
		es->total_ns += delta;
		es->corrected_ns += corrected;
	}
	return 0;
}

/* hist_slot() as a global function: the verifier checks its branches once,
 * on their own, and its callers see one unknown number to bound; inlined,
 * its five-step binary search multiplied their paths (record() called it
 * twice), and probe_return and stmt_return took 0.065 s each to verify */
__noinline __u64 slot_of(__u64 v)
{
	return hist_slot(v);
}

/* corrected: the latency less the probes' cost inside it, signed: the sums
 * stay unbiased; the histogram of corrected latencies clamps a call at 0.
 * A global function: the verifier checks it once, not once per path into
 * it (inlined, it took half of the object's 0.18 s load) */
__noinline int record(__u32 probe, __u64 delta, __s64 corrected, __u64 nested, __s32 part)
{
	struct part_key pk = { .probe = probe, .part = (__u32)part };
	struct probe_stats *ps = bpf_map_lookup_elem(&stats, &probe);
	struct part_stats *pp, *zero_part;
	__u64 slot = slot_of(delta), cslot = slot_of(corrected > 0 ? (__u64)corrected : 0);
	__u32 zero = 0;

	/* hist_slot() already clamps; these checks (on 64-bit values, so clang
	 * checks the registers it indexes with) are for the verifier */
	asm volatile("" : "+r"(slot));
	asm volatile("" : "+r"(cslot));
	if (slot >= MAX_SLOTS || cslot >= MAX_SLOTS)
		return 0;

	if (ps) {
		__sync_fetch_and_add(&ps->calls, 1);
		__sync_fetch_and_add(&ps->total_ns, delta);
		__sync_fetch_and_add(&ps->nested_hits, nested);
		__sync_fetch_and_add(&ps->corrected_ns, corrected);
		__sync_fetch_and_add(&ps->hist[slot], 1);
		__sync_fetch_and_add(&ps->chist[cslot], 1);
	}
	if (part >= 0) {
		pp = bpf_map_lookup_elem(&part_stats, &pk);
		if (!pp) {
			zero_part = bpf_map_lookup_elem(&empty_part, &zero);
			if (zero_part)
				bpf_map_update_elem(&part_stats, &pk, zero_part, BPF_NOEXIST);
			pp = bpf_map_lookup_elem(&part_stats, &pk);
		}
		if (pp) {
			__sync_fetch_and_add(&pp->calls, 1);
			__sync_fetch_and_add(&pp->total_ns, delta);
			__sync_fetch_and_add(&pp->corrected_ns, corrected);
			__sync_fetch_and_add(&pp->hist[slot], 1);
			__sync_fetch_and_add(&pp->chist[cslot], 1);
		}
	}
	return 0;
}

#endif
