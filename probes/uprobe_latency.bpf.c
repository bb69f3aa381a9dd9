// SPDX-License-Identifier: GPL-2.0
/* Entry/return latency of user-space functions, one program pair for any
 * number of probed symbols. User space attaches probe_entry and probe_return
 * to each symbol with a cookie (see uprobe_latency.h) and reads the maps.
 *
 * Each thread keeps a stack of open probed calls, so nested and recursive
 * calls are timed separately, and each call knows how many probe hits
 * happened inside it; per thread, calls are kept by their probed caller
 * (the edges of the call tree). A partition id, when known, is carried down the stack
 * so callees are attributed to the partition their caller chose.
 *
 * This file is the core; the same object's statement keying, stage tracking
 * and waits for a CPU are in latency_statements.bpf.h, latency_stages.bpf.h
 * and latency_cpu_waits.bpf.h, included below. */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "uprobe_latency.h"

char LICENSE[] SEC("license") = "GPL";

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

SEC("uprobe")
int probe_entry(struct x86_64_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 mode = (cookie >> COOKIE_MODE_SHIFT) & 0xff;
	__u32 depth, tid = (__u32)pid_tgid;
	struct thread_stack *st;
	struct frame *f;
	__s32 part = -1;

	int who = wanted(pid_tgid);

	if (who == SKIP)
		return 0;
	if (who == TARGET)
		count(CNT_ENTRIES);
	if (cookie & COOKIE_ENTRY_ONLY)
		return 0;
	st = thread_stack(tid, true, who);
	if (!st)
		return 0;
	st->hits++;
	depth = st->depth;
	if (depth >= MAX_DEPTH) {
		st->overflow++;
		count(CNT_DEPTH_OVERFLOW);
		return 0;
	}
	if (depth > 0)
		part = st->frames[(depth - 1) & (MAX_DEPTH - 1)].part;
	f = &st->frames[depth & (MAX_DEPTH - 1)];
	f->probe = cookie & COOKIE_PROBE_MASK;
	f->arg = arg_value(ctx, (cookie >> COOKIE_ARG_SHIFT) & 0x7f);
	if (mode == PART_ARG_VALUE)
		part = (__s32)(__u32)f->arg;
	f->part = part;
	f->stage = st->stage;
	f->hits_at_entry = st->hits;
	f->cost_at_entry = st->cost_ns;
	f->preempted_at_entry = st->preempted_ns;
	st->depth = depth + 1;
	f->ts = bpf_ktime_get_ns();
	return 0;
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

#include "latency_cpu_waits.bpf.h"
#include "latency_statements.bpf.h"

SEC("uretprobe")
int probe_return(struct x86_64_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 probe = cookie & COOKIE_PROBE_MASK;
	__u32 mode = (cookie >> COOKIE_MODE_SHIFT) & 0xff;
	__u32 tid = (__u32)pid_tgid, depth, idx = 0, part_id;
	struct thread_stack *st;
	struct frame *f;
	__u32 cls = (cookie >> COOKIE_CLASS_SHIFT) & 0xff;
	struct probe_cost *cost = bpf_map_lookup_elem(&costs, &cls);
	__u64 nested, delta, waited, inner_cost, own = cost ? cost->own_ns : 0, pair = cost ? cost->pair_ns : 0;
	__s64 corrected;
	__s32 part;
	__u32 parent, stage;
	int i, found = 0;

	int who = wanted(pid_tgid);

	if (who == SKIP)
		return 0;
	if (who == TARGET)
		count(CNT_RETURNS);
	st = thread_stack(tid, false, who);
	if (!st) {
		count(CNT_UNMATCHED_RETURNS);
		return 0;
	}
	depth = st->depth;
	if (depth > MAX_DEPTH)
		depth = MAX_DEPTH;
	if (st->overflow) {
		/* a call past MAX_DEPTH returns before anything recorded below it */
		if (!depth || st->frames[(depth - 1) & (MAX_DEPTH - 1)].probe != probe) {
			st->overflow--;
			st->hits++;
			return 0;
		}
	}
	for (i = 0; i < MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		idx = (depth - 1 - i) & (MAX_DEPTH - 1);
		if (st->frames[idx].probe == probe) {
			st->found = idx;
			found = 1;
			break;
		}
	}
	/* read the index back from the map: the verifier then checks what
	 * follows once, not once for every loop iteration it could come from */
	idx = *(volatile __u32 *)&st->found & (MAX_DEPTH - 1);
	if (!found) {
		st->hits++;
		count(CNT_UNMATCHED_RETURNS);
		return 0;
	}
	if (idx + 1 < depth) /* frames above never saw their return (exception unwinding, longjmp) */
		count_by(CNT_LOST_FRAMES, depth - idx - 1);
	f = &st->frames[idx & (MAX_DEPTH - 1)];
	nested = st->hits - f->hits_at_entry;
	st->hits++;
	delta = now - f->ts;
	/* time it waited for a CPU is the scheduler's, not the function's */
	waited = st->preempted_ns - f->preempted_at_entry;
	if (waited > delta)
		waited = delta;
	delta -= waited;
	if (waited)
		count_preempted(probe, waited);
	/* what the probes cost inside this call: its own share and the full
	 * cost of every probed call nested in it */
	inner_cost = own + (st->cost_ns - f->cost_at_entry);
	st->cost_ns += pair;
	part = f->part;
	if (mode == PART_ARG_OUT_PTR) {
		if (bpf_probe_read_user(&part_id, sizeof(part_id), (void *)f->arg) == 0) {
			part = (__s32)part_id;
			/* the caller is now working on the partition this call chose */
			if (idx > 0)
				st->frames[(idx - 1) & (MAX_DEPTH - 1)].part = part;
		} else {
			count(CNT_PART_READ_ERRORS);
		}
	}
	st->depth = idx;
	stage = f->stage;
	corrected = (__s64)(delta - inner_cost);
	record(probe, delta, corrected, nested, part);
	parent = idx > 0 ? st->frames[(idx - 1) & (MAX_DEPTH - 1)].probe : NO_PARENT;
	record_edge(tid, probe, parent, delta, corrected);
	if (who == TARGET && st->stmt_depth && st->stmt_window == st->window) {
		struct stmt_edge_key sk = { .stmt = st->stmt_key, .probe = probe, .parent = parent, .stage = stage };

		record_stmt_edge(&sk, delta, corrected);
	}
	return 0;
}

/* ---- the sentinel ----
 * Attached for the whole session at the target's entry point, which a
 * running process never executes: it keeps the kernel's mark that the
 * process has uprobes set while the duty cycles' probes come and go (see
 * UprobeSession._attach_sentinel). It never runs. */

SEC("uprobe")
int sentinel(void *ctx)
{
	return 0;
}

#include "latency_stages.bpf.h"
